package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/app"
	"ticketrelay/internal/flagenv"
	"ticketrelay/internal/operate"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
	"ticketrelay/ticket"
)

// adminStore is the part of the ledger the operator commands use.
type adminStore interface {
	operate.Store
	// Trail is the database's audit trail: the actions record there
	// (actor), and `audit` reads it.
	Trail() *trail.Store
}

// actor is who runs an operator command (-operator, else the OS user),
// with the database's trail to record the action in.
func actor(l adminStore, fs *flag.FlagSet) operate.Actor {
	return operate.CommandLine(optionalFlag(fs, "operator"), operate.TrailRecorder{Store: l.Trail()})
}

// runAdmin runs an operator subcommand (env.Args[0]). One that reads the
// ledger opens the database itself and writes through a group-commit
// writer of its own, so it works whether or not the dispatcher is running.
func runAdmin(ctx context.Context, cmd command, env app.Env) error {
	cf := cmd.newFlags()
	args, err := parseInterspersed(cf.fs, env.Args[1:], env.Lookup, adminOnlyFlags...)
	if errors.Is(err, flag.ErrHelp) {
		cmd.usage().Print(env.Stdout, cf.fs, adminOnlyFlags...)
		return nil
	}
	if err != nil {
		return cmd.usage().FlagError(cf.fs, err)
	}
	// The NATS credentials are checked only by a command that connects:
	// the unit's environment may hold them for a status of the ledger.
	var natsOpts []nats.Option
	if cf.nats != nil && (!cmd.ledger || flagValue(cf.fs, "multi-host") == "true") {
		if err := cf.nats.Check(env.Lookup); err != nil {
			return err
		}
		if natsOpts, err = cf.nats.Options(env.Lookup); err != nil {
			return err
		}
	}
	if !cmd.ledger || (cmd.name == "audit" && flagValue(cf.fs, "multi-host") == "true") {
		return cmd.run(ctx, nil, cf.fs, natsOpts, args, env.Stdout)
	}
	dbPath, dataDir := cf.db, cf.data
	if *dbPath == "" {
		*dbPath = filepath.Join(*dataDir, "tickets.db")
	}
	// Opening creates and migrates a missing database: a mistyped path
	// would report an empty ledger.
	if _, err := os.Stat(*dbPath); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no database at %s (give the dispatcher's -data DIR or -db PATH)", *dbPath)
	} else if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	db, err := store.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A redrive puts rows back in the outbox: the relay hears of it at once.
	waker := outbox.NewWaker(outbox.WakeupPath(db.Path))
	defer waker.Close()
	w := sqlitedb.NewWriter(db, log, metrics.NewDispatcher(prometheus.NewRegistry()).Writer, sqlitedb.AfterCommit(waker.Wake))
	defer w.Close()
	tr, err := trail.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer tr.Close()
	op := &operated{Ledger: ledger.New(db, w, time.Now), trail: tr}
	return cmd.run(ctx, op, cf.fs, natsOpts, args, env.Stdout)
}

// parseInterspersed parses flags that may come after positional arguments
// ("resolve ID -failed") and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string, lookup func(string) (string, bool), noEnv ...string) ([]string, error) {
	if _, err := flagenv.ParseExcept(fs, args, lookup, noEnv...); err != nil {
		return nil, err
	}
	var pos []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		pos = append(pos, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

func flagValue(fs *flag.FlagSet, name string) string { return fs.Lookup(name).Value.String() }

// optionalFlag is flagValue of a flag some commands lack; "" for those.
func optionalFlag(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

func adminStatus(ctx context.Context, l adminStore, fs *flag.FlagSet, natsOpts []nats.Option, args []string, out io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: status takes no arguments", app.ErrUsage)
	}
	// The cluster first: it brings the outcomes other hosts' forwarders
	// recorded into this ledger before the ledger is counted.
	cluster, err := clusterStatusOf(ctx, fs, natsOpts, l)
	if err != nil {
		return err
	}
	s, err := l.Summarize(ctx)
	if err != nil {
		return err
	}
	if flagValue(fs, "json") == "true" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(statusJSON{
			Dispatchers:      s.Dispatchers,
			Backlog:          s.Backlog,
			OldestAgeSeconds: s.OldestAge.Seconds(),
			Targets:          orEmpty(s.Targets),
			Uncertain:        orEmpty(withOperatorDetail(s.Uncertain)),
			Cluster:          cluster,
		}); err != nil {
			return err
		}
		return clusterErr(cluster)
	}
	fmt.Fprintf(out, "dispatchers running: %d\noutbox backlog: %d (oldest %s)\n\n", s.Dispatchers, s.Backlog, s.OldestAge.Round(time.Millisecond))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tWAITING\tDELIVERED\tIN FLIGHT\tRETRYING\tFAILED\tUNCERTAIN\t")
	var unserved []string
	for _, t := range s.Targets {
		note := ""
		switch {
		case s.Dispatchers == 0 || t.Served:
		case t.Waiting+t.InFlight+t.Retrying > 0:
			note = "not served"
			unserved = append(unserved, t.Target)
		default:
			// A target taken out of the configuration: its past requests
			// are still in the ledger until -retention prunes them.
			note = "not configured (past requests only)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Target, t.Waiting, t.Delivered, t.InFlight, t.Retrying, t.Failed, t.Uncertain, note)
	}
	tw.Flush()
	if s.Dispatchers == 0 {
		fmt.Fprintf(out, "\nno dispatcher is running: nothing is delivered until one runs\n")
	}
	if len(unserved) > 0 {
		fmt.Fprintf(out, "\nno running dispatcher delivers to %s: their requests wait until one does "+
			"(give every dispatcher the same -config as mcp-front)\n", strings.Join(unserved, ", "))
	}
	if len(s.Uncertain) > 0 {
		fmt.Fprintf(out, "\nuncertain requests (check the target, then `dispatcher resolve ID -delivered EXTERNAL_ID` or `-failed`):\n")
		for _, u := range s.Uncertain {
			fmt.Fprintf(out, "  %s  ticket %s  target %s  attempts %d%s\n    %s\n", u.RequestID, u.TicketID, u.Target, u.Attempts,
				callerText(u.Caller), downstream.Printable(u.LastError)) // text a downstream answered; -json escapes it
		}
	}
	printBrokerHint(out, flagValue(fs, "data"))
	if cluster != nil {
		printCluster(out, cluster)
	}
	return clusterErr(cluster)
}

// callerText names who asked for a request on its status line: the
// operator may need to ask them whether the ticket arrived. A token's name
// and email are the issuer's text, so they are printed escaped.
func callerText(c *ticket.Caller) string {
	if c == nil {
		return ""
	}
	who := c.Subject
	if d := c.Display(); d != c.Subject {
		who += " (" + d + ")"
	}
	return "  caller " + downstream.Printable(who)
}

// uncertainJSON is an uncertain request in `status -json`: where it
// stands, and what the operator is told of it.
type uncertainJSON struct {
	request.Report
	Detail string `json:"detail"`
}

// withOperatorDetail writes each uncertain request's detail for the
// operator: what to check and which command settles it.
func withOperatorDetail(uncertain []request.Report) []uncertainJSON {
	var out []uncertainJSON
	for _, u := range uncertain {
		out = append(out, uncertainJSON{Report: u, Detail: "The outcome of an attempt to deliver to " + u.Target + " is unknown (" + u.LastError + "), and " + u.Target +
			" offers no way to check it automatically, so it is not resent. Check " + u.Target + " for ticket " + u.TicketID +
			" (look for its title). If it is there, record it with `dispatcher resolve -data DIR " + u.OperatorName() +
			" -delivered EXTERNAL_ID`; if it is not, settle it with `dispatcher resolve -data DIR " + u.OperatorName() +
			" -failed` (the agent is told to create it again with a new request_id)."})
	}
	return out
}

// statusJSON is `status -json`: snake_case keys, the age in seconds, lists
// never null.
type statusJSON struct {
	Dispatchers      int                   `json:"dispatchers"`
	Backlog          int64                 `json:"backlog"`
	OldestAgeSeconds float64               `json:"oldest_age_seconds"`
	Targets          []ledger.TargetCounts `json:"targets"`
	Uncertain        []uncertainJSON       `json:"uncertain"`
	Cluster          *operate.ClusterView  `json:"cluster,omitempty"` // with -multi-host
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func adminRedrive(ctx context.Context, l adminStore, fs *flag.FlagSet, _ []nats.Option, args []string, out io.Writer) error {
	all := flagValue(fs, "failed") == "true"
	target := flagValue(fs, "target")
	switch {
	case all && len(args) > 0, !all && len(args) == 0:
		return fmt.Errorf("%w: redrive takes REQUEST_IDs or -failed", app.ErrUsage)
	case target != "" && !all:
		return fmt.Errorf("%w: -target goes with -failed", app.ErrUsage)
	}
	who := actor(l, fs)
	if all {
		ids, err := operate.RedriveFailed(ctx, l, who, target)
		for _, id := range ids {
			fmt.Fprintf(out, "redriven %s\n", id)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%d failed requests redriven\n", len(ids))
		return nil
	}
	done, err := operate.Redrive(ctx, l, who, args)
	for _, id := range done {
		fmt.Fprintf(out, "redriven %s\n", id)
	}
	return err
}

func adminResolve(ctx context.Context, l adminStore, fs *flag.FlagSet, _ []nats.Option, args []string, out io.Writer) error {
	ext := flagValue(fs, "delivered")
	failed := flagValue(fs, "failed") == "true"
	if len(args) != 1 || (ext == "") == !failed {
		return fmt.Errorf("%w: resolve takes one REQUEST_ID and either -delivered EXTERNAL_ID or -failed", app.ErrUsage)
	}
	if err := operate.Resolve(ctx, l, actor(l, fs), args[0], operate.Resolution{ExternalID: ext}); err != nil {
		return err
	}
	if failed {
		fmt.Fprintf(out, "%s settled as failed\n", args[0])
	} else {
		fmt.Fprintf(out, "%s settled as delivered (%s)\n", args[0], ext)
	}
	return nil
}
