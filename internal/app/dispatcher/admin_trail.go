package dispatcher

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/app"
	"ticketrelay/store/trail"
)

// auditFlags are the audit command's own flags (no environment twins: a
// stray TICKETRELAY_SUBJECT must not filter an operator's read silently).
var auditFlags = []string{"since", "until", "subject", "tool", "request-id", "outcome", "follow"}

// followEvery is how often audit -follow looks for new entries.
const followEvery = time.Second

var auditCommand = command{
	name: "audit",
	synopsis: []string{
		"audit [-db PATH | -data DIR] [-since T] [-until T] [-subject S] [-tool NAME] [-request-id ID] [-outcome O] [-json] [-follow]",
		"audit -multi-host -nats URL -installation NAME [filters] [-json]",
	},
	summary: "the audit trail: every tool call and operator action",
	about: `Prints the audit trail: one entry per tool call mcp-front answered or
refused (time, subject, client name and version, tool, request id, outcome:
accepted, replayed, conflict, refused, invalid, error, ok for find_request;
ticket id) and per operator action (redrive, resolve, forget-host: who, on
which request, done or failed). It holds no token and no ticket text.
-json prints one JSON object per line; -follow keeps printing new entries
until interrupted. -since and -until take a time (RFC 3339) or a duration
back from now (24h). -request-id takes the id as the ledger names it
(SUBJECT:REQUEST_ID for a token's subject). With -multi-host it reads every
host's entries from the installation's trail stream instead of this
database.
`,
	ledger: true,
	flags: func(fs *flag.FlagSet) *app.NATSFlags {
		fs.Bool("json", false, "print JSON lines")
		fs.Bool("follow", false, "keep printing new entries (not with -multi-host)")
		fs.String("since", "", "entries from this `time` on (RFC 3339, or a duration back from now)")
		fs.String("until", "", "entries before this `time` (RFC 3339, or a duration back from now)")
		fs.String("subject", "", "only this caller's or operator's entries (`subject`)")
		fs.String("tool", "", "only the calls of this tool, or this operator `action`")
		fs.String("request-id", "", "only this request's entries (`id`, scoped: SUBJECT:REQUEST_ID)")
		fs.String("outcome", "", "only entries with this `outcome`")
		fs.Bool("multi-host", false, "read every host's entries from the installation's trail stream (needs -nats and -installation)")
		nf := addClusterConnFlags(fs)
		return &nf
	},
	run: adminAudit,
}

// auditFilter reads the filters of the audit command.
func auditFilter(fs *flag.FlagSet, now time.Time) (trail.Filter, error) {
	f := trail.Filter{Subject: flagValue(fs, "subject"), Name: flagValue(fs, "tool"),
		RequestID: flagValue(fs, "request-id"), Outcome: flagValue(fs, "outcome")}
	var err error
	if f.Since, err = timeFlag(fs, "since", now); err != nil {
		return f, err
	}
	if f.Until, err = timeFlag(fs, "until", now); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, fmt.Errorf("%w: -since must come before -until", app.ErrUsage)
	}
	return f, nil
}

// timeFlag is a time flag's value: RFC 3339, or a duration back from now.
func timeFlag(fs *flag.FlagSet, name string, now time.Time) (time.Time, error) {
	v := flagValue(fs, name)
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: -%s %q: want a time (RFC 3339, 2026-12-07T09:00:00Z) or a duration back from now (24h)", app.ErrUsage, name, v)
}

func adminAudit(ctx context.Context, l adminStore, fs *flag.FlagSet, natsOpts []nats.Option, args []string, out io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: audit takes no arguments (filters are flags)", app.ErrUsage)
	}
	f, err := auditFilter(fs, time.Now())
	if err != nil {
		return err
	}
	asJSON, follow := flagValue(fs, "json") == "true", flagValue(fs, "follow") == "true"
	p := newAuditPrinter(out, asJSON)
	if flagValue(fs, "multi-host") == "true" {
		if follow {
			return fmt.Errorf("%w: -follow reads this host's database; without -multi-host", app.ErrUsage)
		}
		c, err := connectCluster(fs, natsOpts, "audit -multi-host")
		if err != nil {
			return err
		}
		defer c.nc.Close()
		entries, err := trail.ReadStream(ctx, c.js, c.inst, f)
		if err != nil {
			return err
		}
		return p.print(entries)
	}
	store := l.Trail()
	for {
		entries, err := store.Query(ctx, f)
		if err != nil {
			return err
		}
		if err := p.print(entries); err != nil {
			return err
		}
		if !follow {
			return nil
		}
		if len(entries) > 0 {
			f.AfterSeq = entries[len(entries)-1].Seq
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followEvery):
		}
	}
}

// auditPrinter prints entries as JSON lines or as a table.
type auditPrinter struct {
	out    io.Writer
	asJSON bool
	header bool // the table's header was printed
}

func newAuditPrinter(out io.Writer, asJSON bool) *auditPrinter {
	return &auditPrinter{out: out, asJSON: asJSON}
}

func (p *auditPrinter) print(entries []trail.Entry) error {
	if p.asJSON {
		enc := json.NewEncoder(p.out)
		for _, e := range entries {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	if !p.header {
		fmt.Fprintln(tw, "TIME\tHOST\tSUBJECT\tCLIENT\tTOOL/ACTION\tREQUEST\tOUTCOME\tTICKET\tREASON")
		p.header = true
	}
	for _, e := range entries {
		name, client := e.Tool, e.Client
		if e.Kind == trail.KindOperator {
			name = "operator: " + e.Action
		}
		if e.ClientVersion != "" {
			client += " " + e.ClientVersion
		}
		// Subjects, clients and tool names are the callers' text.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.RFC3339Nano), dash(e.Host), dash(downstream.Printable(e.Subject)),
			dash(downstream.Printable(client)), dash(downstream.Printable(name)), dash(downstream.Printable(e.RequestID)), e.Outcome, dash(e.TicketID), downstream.Printable(e.Reason))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
