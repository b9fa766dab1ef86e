package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Main is the load generator's command line (testkit/cmd/loadgen).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var sessions, only, frontEnv, frontArgs, dispEnv, dispArgs, cpuProfile string
	fs.StringVar(&cfg.BinDir, "bin", "bin", "`directory` with mcp-front, dispatcher, noopserver, receiver and riverbaseline (and profwrap for -pprof; nats-server for scenario 9, else built from the pinned module)")
	fs.StringVar(&cfg.OutDir, "out", "bench/results", "`directory` for latest.md (latest-quick.md with -quick; latest[-quick]-only-N.md with -only); empty: none")
	fs.StringVar(&cfg.WorkDir, "work", "", "`directory` for the scenarios' data (default: a temporary one, removed afterwards)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary data directory")
	fs.BoolVar(&cfg.Quick, "quick", getenv("BENCH_QUICK") == "1", "~1 minute smoke run (default from BENCH_QUICK=1)")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "unmeasured run before the first measurement on new sessions (default 1.5s, quick 0.5s)")
	fs.DurationVar(&cfg.Settle, "settle", 0, "unmeasured start of every later run (default 500ms, quick 250ms)")
	fs.DurationVar(&cfg.Measure, "measure", 0, "measured window of one round (default 2.5s, quick 2s)")
	fs.IntVar(&cfg.Rounds, "rounds", 0, "alternated rounds of each figure and its baseline (default 4, quick 1)")
	fs.StringVar(&sessions, "sessions", "1,8,32", "scenario 1's session `counts`; the largest is used by the other scenarios")
	fs.StringVar(&cfg.Protocol, "protocol", "2025-11-25", "MCP protocol `version` the clients ask for (2026-07-28: served without sessions)")
	fs.IntVar(&cfg.RelayRows, "relay-rows", 0, "scenario 4's outbox backlog (default 100000, quick 10000)")
	fs.IntVar(&cfg.RawRows, "raw-rows", 0, "messages of scenario 4's raw publish baseline (default a quarter of -relay-rows, at least 5000)")
	fs.IntVar(&cfg.GrowthRows, "growth-rows", 0, "scenario 6's prefilled ledger rows (default 1000000, quick 100000)")
	fs.IntVar(&cfg.BacklogRows, "backlog-rows", 0, "scenario 8's backlog (default 50000, quick 5000)")
	fs.IntVar(&cfg.BacklogRounds, "backlog-rounds", 0, "scenario 8's alternated rounds of each sender (default 2, quick 1)")
	fs.IntVar(&cfg.SlowRows, "slow-rows", 0, "scenario 8's backlog to the slow receiver (default 4000, quick 1000)")
	fs.DurationVar(&cfg.SlowLatency, "slow-latency", 0, "how long scenario 8's slow receiver takes to answer (default 50ms)")
	fs.BoolVar(&cfg.BacklogAlone, "backlog-alone", false, "scenario 8's ticketrelay rounds only (no River, ceiling or slow receiver): for A/B runs of two dispatcher builds")
	fs.IntVar(&cfg.RiverWorkers, "river-workers", 0, "MaxWorkers of scenario 8's River baseline (default 100)")
	fs.StringVar(&only, "only", "", fmt.Sprintf("comma-separated `scenarios` to run (default all: %v)", allScenarios))
	fs.StringVar(&cfg.PprofDir, "pprof", "", "save CPU profiles of the servers at the largest session count to this `directory`")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to this `file`")
	fs.StringVar(&frontEnv, "front-env", "", "space-separated `VAR=value` added to mcp-front's environment (a tuning trial, e.g. GOGC=200)")
	fs.StringVar(&frontArgs, "front-args", "", "space-separated extra mcp-front `flags`")
	fs.StringVar(&dispArgs, "dispatcher-args", "", "space-separated extra dispatcher `flags`")
	fs.StringVar(&dispEnv, "dispatcher-env", "", "space-separated `VAR=value` added to the dispatcher's environment")
	fs.Float64Var(&cfg.LagRate, "lag-rate", 0, "scenario 5's pace in `calls/s` (default half of scenario 7's throughput, the whole pipeline's)")
	var ab ABConfig
	var abEnvA, abEnvB, abArgsA, abArgsB string
	abOn := fs.Bool("ab", false, "instead of the scenarios, compare two mcp-front variants A and B (create_ticket at the largest session count, alternated rounds)")
	fs.StringVar(&ab.BinA, "ab-bin-a", "", "mcp-front `binary` of side A (default BIN/mcp-front)")
	fs.StringVar(&ab.BinB, "ab-bin-b", "", "mcp-front `binary` of side B (default BIN/mcp-front)")
	fs.StringVar(&abEnvA, "ab-env-a", "", "space-separated `VAR=value` for side A")
	fs.StringVar(&abEnvB, "ab-env-b", "", "space-separated `VAR=value` for side B")
	fs.StringVar(&abArgsA, "ab-args-a", "", "space-separated extra `flags` for side A")
	fs.StringVar(&abArgsB, "ab-args-b", "", "space-separated extra `flags` for side B")
	fs.IntVar(&ab.Rows, "ab-rows", 0, "prefill both ledgers with this many `rows` first")
	fs.BoolVar(&ab.Delivery, "ab-delivery", false, "compare two dispatcher variants instead: -ab-bin-a/-b name dispatcher binaries, and each drains scenario 8's backlog, alternately")
	fs.StringVar(&cfg.Version, "version", "dev", "build `name` printed in the report")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loadgen [flags]\n\nRuns ticketrelay's benchmark scenarios against real processes on loopback and prints one table.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var err error
	if cfg.Sessions, err = ints(sessions); err != nil {
		return fmt.Errorf("-sessions: %w", err)
	}
	if cfg.Only, err = ints(only); err != nil {
		return fmt.Errorf("-only: %w", err)
	}
	cfg.FrontEnv, cfg.FrontArgs, cfg.DispatcherArgs = strings.Fields(frontEnv), strings.Fields(frontArgs), strings.Fields(dispArgs)
	cfg.DispatcherEnv = strings.Fields(dispEnv)
	if *abOn {
		ab.EnvA, ab.EnvB, ab.ArgsA, ab.ArgsB = strings.Fields(abEnvA), strings.Fields(abEnvB), strings.Fields(abArgsA), strings.Fields(abArgsB)
		cfg.AB = &ab
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
	cfg.Stdout = stdout
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return Run(ctx, cfg)
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
