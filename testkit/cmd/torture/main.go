// Command torture runs ticketrelay under faults and checks the history
// afterwards (see package torture). It prints one line per property, the
// counts and the seed; it exits 1 if a property is violated, 2 on a usage
// error and 3 if the harness could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"ticketrelay/testkit/torture"
)

func main() {
	torture.ChildMain() // -powercut reads SQLite in a child: this program run again
	var cfg torture.Config
	flag.StringVar(&cfg.FrontBin, "front", "bin/mcp-front", "mcp-front `binary`")
	flag.StringVar(&cfg.DispatcherBin, "dispatcher", "bin/dispatcher", "dispatcher `binary`")
	flag.StringVar(&cfg.NATSBin, "nats-server", "bin/nats-server", "nats-server `binary`")
	flag.StringVar(&cfg.Dir, "dir", "", "run `directory`: data, logs, history.jsonl (default: a new temporary directory)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "`seed` of every random decision (0: from the clock); a failing run prints its seed")
	flag.IntVar(&cfg.Callers, "callers", 6, "concurrent MCP callers")
	flag.IntVar(&cfg.Requests, "requests", 0, "requests per caller (0: as many as fit in -duration)")
	flag.DurationVar(&cfg.Duration, "duration", 3*time.Minute, "length of the fault phase")
	flag.IntVar(&cfg.Kills, "kills", 0, "SIGKILLs during the fault phase (0: one per 5s)")
	flag.IntVar(&cfg.StreamFaults, "stream-faults", 0, "deletions and purges of the stream during the fault phase, in turn (0: one per 30s; negative: none; one host, no -powercut)")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", 0.25, "share of downstream calls answered with a fault (negative: none)")
	flag.BoolVar(&cfg.PowerCut, "powercut", false, "power-cut mode: data and JetStream store on a FUSE mount (needs /dev/fuse, root); each of -kills SIGKILLs every process together and drops what was not fsynced")
	flag.BoolVar(&cfg.LazyNATS, "powercut-lazy-nats", false, "with -powercut: nats-server without sync_interval: always, to show a cut losing acknowledged messages and the stream audit publishing them again")
	flag.IntVar(&cfg.Hosts, "hosts", 0, "multi-host run: `N` hosts (2 or 3) of one installation on a 3-node NATS cluster, one lost for good half way (0: one host)")
	flag.DurationVar(&cfg.HostDeadAfter, "host-dead-after", 3*time.Second, "with -hosts: the hosts' -host-dead-after")
	flag.BoolVar(&cfg.NodeFaultsOnly, "node-faults-only", false, "with -hosts: NATS node faults only (a leader or node stopped or killed for 4-7 s), no host fault; checks that no live host is adopted and acceptance stops no longer than the failover bound")
	flag.DurationVar(&cfg.LostOutboxFor, "lost-outbox-for", 0, "with -hosts: how long the lost host's front accepts with its dispatcher already dead (0: a tenth of -duration)")
	verbose := flag.Bool("v", false, "log the harness's progress to stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "torture: unexpected arguments", flag.Args())
		os.Exit(2)
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "ticketrelay-torture-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "torture:", err)
			os.Exit(3)
		}
		cfg.Dir = dir
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := torture.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "torture: %v (seed %d, dir %s)\n", err, rep.Seed, cfg.Dir)
		os.Exit(3)
	}
	for _, l := range rep.Lines() {
		fmt.Println(l)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
