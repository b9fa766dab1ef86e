package dispatcher

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"

	"ticketrelay/internal/app"
)

// command is one of the dispatcher's operator subcommands: what its -help
// says, its flags, and what it runs.
type command struct {
	name     string
	synopsis []string // its command lines, after "dispatcher "
	summary  string   // its line in the dispatcher's -help
	about    string   // what it does, in its own -help
	// ledger: it opens the dispatcher's database (-db, -data); without,
	// it runs against the cluster from wherever the operator is.
	ledger bool
	// operates: it changes something, and the audit trail records who did
	// it (-operator).
	operates bool
	// flags declares its own flags on fs beside -db and -data; the NATS
	// flags of a command that connects to the cluster are returned.
	flags func(fs *flag.FlagSet) *app.NATSFlags
	run   func(ctx context.Context, l adminStore, fs *flag.FlagSet, natsOpts []nats.Option, args []string, out io.Writer) error
}

// adminOnlyFlags are the subcommands' own flags. They have no environment
// twin: TICKETRELAY_FAILED=true must not turn a bare `redrive` into "redrive
// every failed request". The others keep theirs: -db and -data name the
// same database as the dispatcher's, -nats and the like the same cluster,
// so an operator runs a command with the environment of the dispatcher's
// unit.
var adminOnlyFlags = append([]string{"json", "failed", "target", "delivered"}, auditFlags...)

// commands are the dispatcher's subcommands, in the order -help lists them.
var commands = []command{
	{
		name: "status",
		synopsis: []string{
			"status [-db PATH | -data DIR] [-json]",
			"status [-db PATH | -data DIR] [-json] -multi-host -nats URL -installation NAME",
		},
		summary: "the backlog, each target's counts, the uncertain requests",
		about: `Prints what the dispatcher's ledger holds: the dispatchers running, the
outbox backlog and its oldest age, each target's requests by state, and
every uncertain request with what to check and which command settles it;
-json prints it as JSON. With -multi-host it also shows the installation's
hosts, stream and request bucket, and exits with status 1 if the cluster
did not answer everything.
`,
		ledger: true,
		flags: func(fs *flag.FlagSet) *app.NATSFlags {
			fs.Bool("json", false, "print JSON")
			nf := addClusterFlags(fs)
			return &nf
		},
		run: adminStatus,
	},
	{
		name: "redrive",
		synopsis: []string{
			"redrive [-db PATH | -data DIR] REQUEST_ID...",
			"redrive [-db PATH | -data DIR] -failed [-target TARGET]",
		},
		summary: "put failed requests back into delivery",
		about: `Puts failed requests back into delivery, their attempts counted from zero.
The dedupe key sent downstream is the same, so a redrive is safe where
filing the ticket again under a new request_id is not. Give the requests'
ids (a token subject's as SUBJECT:REQUEST_ID), or -failed for every failed
request, of one target with -target. It takes failed requests only.
`,
		ledger:   true,
		operates: true,
		flags: func(fs *flag.FlagSet) *app.NATSFlags {
			fs.Bool("failed", false, "every failed request, instead of REQUEST_IDs")
			fs.String("target", "", "with -failed: only the failed requests to this `target`")
			return nil
		},
		run: adminRedrive,
	},
	{
		name: "resolve",
		synopsis: []string{
			"resolve [-db PATH | -data DIR] REQUEST_ID -delivered EXTERNAL_ID",
			"resolve [-db PATH | -data DIR] REQUEST_ID -failed",
		},
		summary: "settle an uncertain request once you checked its target",
		about: `Settles an uncertain request: one whose delivery attempt has an unknown
outcome at a target that offers no way to check it, so it is not sent
again. Look for the ticket at the target (status says what to look for),
then record -delivered EXTERNAL_ID if it is there, or -failed if it is not
(the agent is then told to file it again under a new request_id).
`,
		ledger:   true,
		operates: true,
		flags: func(fs *flag.FlagSet) *app.NATSFlags {
			fs.String("delivered", "", "settle as delivered, with the `external_id` the target gave the ticket")
			fs.Bool("failed", false, "settle as not delivered")
			return nil
		},
		run: adminResolve,
	},
	{
		name:     "forget-host",
		synopsis: []string{"forget-host -nats URL -installation NAME HOST"},
		summary:  "drop a host removed for good from a multi-host installation",
		about: `Drops a host removed for good from a multi-host installation's cluster
record, once the other hosts have finished adopting what it left (status
-multi-host shows it "finished"): it is no longer listed, nor alerted on.
It refuses a host that is live or not adopted yet. A forgotten host that
runs again rejoins. It needs no database: the installation's audit trail
stream records it.
`,
		operates: true,
		flags: func(fs *flag.FlagSet) *app.NATSFlags {
			nf := addClusterConnFlags(fs)
			return &nf
		},
		run: adminForgetHost,
	},
	auditCommand,
}

// commandNamed is the subcommand called name.
func commandNamed(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandNames lists the subcommands, help included.
func commandNames() []string {
	names := make([]string, 0, len(commands)+1)
	for _, c := range commands {
		names = append(names, c.name)
	}
	return append(names, "help")
}

// commandFlags are a subcommand's flags, declared on their own flag set.
type commandFlags struct {
	fs       *flag.FlagSet
	db, data *string        // nil without the ledger
	nats     *app.NATSFlags // nil for a command that does not connect to the cluster
}

func (c command) newFlags() commandFlags {
	cf := commandFlags{fs: flag.NewFlagSet("dispatcher "+c.name, flag.ContinueOnError)}
	// The errors and the help are ours to print (runAdmin).
	cf.fs.SetOutput(io.Discard)
	cf.fs.Usage = func() {}
	if c.ledger {
		cf.db = cf.fs.String("db", "", "SQLite database `path` (default DATA/tickets.db)")
		cf.data = cf.fs.String("data", "data", "the dispatcher's data `directory`")
	}
	if c.operates {
		cf.fs.String("operator", "", "who runs this, as the audit trail records it (default: the OS user, as os:NAME)")
	}
	cf.nats = c.flags(cf.fs)
	return cf
}

// usage is the subcommand's -help and short usage.
func (c command) usage() app.Usage {
	var b strings.Builder
	for i, l := range c.synopsis {
		lead := "Usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintf(&b, "%sdispatcher %s\n", lead, l)
	}
	return app.Usage{Synopsis: b.String(), About: c.about}
}

// synopsis is the dispatcher's short usage.
const synopsis = "Usage: dispatcher [flags]\n       dispatcher COMMAND [flags] [ARGS]\n"

// about is what the dispatcher's -help says it does, and its commands.
func about() string {
	var b strings.Builder
	b.WriteString(`Relays the tickets mcp-front accepted from the ledger to JetStream, and
delivers them to their targets, retrying and recording each outcome. Give
both processes the same -config.

Commands, for the operator (they work whether or not the dispatcher runs):
`)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-12s %s\n", "help", "this text, or with COMMAND that command's (also COMMAND -help)")
	return b.String()
}

// runHelp answers `dispatcher help [COMMAND]` on stdout: the dispatcher's
// -help, or the command's.
func runHelp(ctx context.Context, env app.Env) error {
	switch args := env.Args[1:]; {
	case len(args) == 0, args[0] == "help" && len(args) == 1:
		env.Args = []string{"-help"}
		return Run(ctx, env)
	case len(args) > 1:
		return fmt.Errorf("%w: help takes one command at most: dispatcher help [COMMAND]", app.ErrUsage)
	default:
		c, ok := commandNamed(args[0])
		if !ok {
			return fmt.Errorf("%w: help %q: no such command; the commands are %s", app.ErrUsage, args[0], strings.Join(commandNames(), ", "))
		}
		c.usage().Print(env.Stdout, c.newFlags().fs, adminOnlyFlags...)
		return nil
	}
}
