// Package front builds mcp-front from its flags: it is the one place where
// its configuration becomes components. cmd/mcp-front only calls Run.
package front

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/config"
	"ticketrelay/front/mcpauth"
	"ticketrelay/front/mcphttp"
	"ticketrelay/front/mcpstdio"
	"ticketrelay/front/mcptools"
	"ticketrelay/internal/app"
	"ticketrelay/internal/dirsync"
	"ticketrelay/metrics"
	"ticketrelay/store"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
)

// synopsis is mcp-front's short usage.
const synopsis = "Usage: mcp-front [flags]\n"

// about is what -help says mcp-front does.
const about = `Serves ticketrelay's MCP tools (the configuration's create tools and
find_request) over streamable HTTP, or over stdin/stdout with -stdio. An
accepted ticket is committed to the ledger (-db), from which the dispatcher
delivers it; give both processes the same -config.
`

// Run runs mcp-front until ctx is cancelled (or stdin closes, in stdio
// mode): options, validated, then built, then served.
func Run(ctx context.Context, env app.Env) error {
	var o Options
	fs := flag.NewFlagSet("mcp-front", flag.ContinueOnError)
	usage := app.Usage{Synopsis: synopsis, About: about, Flags: o.flags(fs)}
	set, log, done, err := app.ParseStart(fs, env, usage, &o.LogLevel)
	if done || err != nil {
		return err
	}
	o.metricsListenSet = set["metrics-listen"]
	o = o.WithDefaults()
	if err := o.Validate(env.Lookup); err != nil {
		return tellStdioClient(ctx, env, o, err)
	}
	stopTracing, err := app.StartTracing(ctx, "mcp-front", env, log)
	if err != nil {
		return tellStdioClient(ctx, env, o, err)
	}
	defer stopTracing()
	f := &front{o: o, env: env, log: log, addrs: map[string]string{}}
	defer f.Close()
	return app.BuildThenRun(ctx, f.buildOrTell, f.serve)
}

// buildOrTell builds; if that fails in stdio mode, it first undoes what
// was built and tells the client why (tellStdioClient).
func (f *front) buildOrTell(ctx context.Context) error {
	err := f.build(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	f.Close()
	return tellStdioClient(ctx, f.env, f.o, err)
}

// front is mcp-front being built and then served: what each build step
// makes, for the steps after it; Close undoes the build.
type front struct {
	o     Options
	env   app.Env
	log   *slog.Logger
	addrs map[string]string // where it listens, announced once serving

	cfg       *config.File
	bindings  []mcptools.Binding
	auth      *mcphttp.AuthConfig // nil: no authentication
	validator *mcpauth.Validator  // nil: no -oauth-issuer
	reg       *prometheus.Registry
	m         *metrics.Front
	srv       *mcp.Server
	access    *mcptools.Access  // nil: no grants
	search    mcptools.Searcher // this host's ledger
	trail     *trail.Writer     // nil: -audit=false
	writer    *sqlitedb.Writer  // the ledger's group commit, which the trail joins

	app.Closers // what build made, undone by Close
}

// build checks what can be refused before anything is written (the
// configuration, the tokens, the ledger's path), then opens the ledger,
// builds the MCP server and serves metrics.
func (f *front) build(ctx context.Context) error {
	if err := app.CheckMetricsListen(f.o.MetricsListen, f.o.Insecure, f.log); err != nil {
		return err
	}
	// The front only needs the file's shape (tools, targets' kinds), never
	// the downstream credentials.
	cfg, err := config.Load(f.o.Config, nil)
	if err != nil {
		return err
	}
	f.cfg = cfg
	if f.bindings, err = bindings(cfg); err != nil {
		return err
	}
	f.access = access(cfg)
	f.reg = app.NewRegistry()
	if !f.o.Stdio {
		if err := f.checkAuth(); err != nil {
			return err
		}
	}
	if err := f.o.checkLedger(); err != nil {
		return err
	}
	requests, err := f.openLedger(ctx)
	if err != nil {
		return err
	}
	if err := f.openTrail(ctx, f.writer); err != nil {
		return err
	}
	mc := mcptools.Config{Version: app.Version, Bindings: f.bindings, Access: f.access, Beyond: beyond(cfg),
		Search: f.search, SearchOwn: cfg.SearchScope == config.SearchScopeOwn,
		GroupWindows: cfg.GroupWindows()}
	if f.trail != nil {
		mc.Trail = f.trail
	}
	if f.srv, err = mcptools.New(mc, requests, f.m, f.log); err != nil {
		return err
	}
	if f.o.BenchNoopTool {
		for _, b := range f.bindings {
			f.log.Warn("benchmark no-op tool enabled: it stores nothing", "tool", mcptools.AddNoopTool(f.srv, b, f.log))
		}
	}
	stop, err := app.ServeMetrics(ctx, f.o.MetricsListen, f.reg, f.log, f.addrs)
	if err != nil {
		return err
	}
	f.OnClose(stop)
	f.fetchKeys(ctx)
	return nil
}

// openLedger opens the ledger (creating and migrating it if missing) and
// returns what the tools accept requests through: the ledger, or with
// -multi-host the cluster record in front of it.
func (f *front) openLedger(ctx context.Context) (mcptools.Requests, error) {
	if err := dirsync.MkdirAll(filepath.Dir(f.o.DB), 0o700); err != nil {
		return nil, fmt.Errorf("database directory: %w", err)
	}
	db, err := store.Open(ctx, f.o.DB)
	if err != nil {
		return nil, err
	}
	f.OnClose(func() { db.Close() })
	f.m = metrics.NewFront(f.reg)
	// Every commit wakes the relay of this database, which reads the new
	// outbox rows at once instead of at its next poll.
	waker := outbox.NewWaker(outbox.WakeupPath(db.Path))
	w := sqlitedb.NewWriter(db, f.log, f.m.Writer, sqlitedb.AfterCommit(waker.Wake))
	f.OnClose(func() {
		w.Close()
		waker.Close()
	})
	l := ledger.New(db, w, time.Now)
	f.writer = w
	f.search = l
	if !f.o.MultiHost {
		return l, nil
	}
	natsOpts, err := f.o.natsFlags.Options(f.env.Lookup)
	if err != nil {
		return nil, err
	}
	requests, closeNATS, err := joinCluster(ctx, f.o.NATS, f.o.Installation, natsOpts, l, f.log)
	if err != nil {
		return nil, err
	}
	f.OnClose(closeNATS)
	return requests, nil
}

// serve serves MCP on stdio or over HTTP until ctx ends.
func (f *front) serve(ctx context.Context) error {
	if f.o.Stdio {
		f.logConfig()
		return f.serveStdio(ctx)
	}
	return f.serveHTTP(ctx)
}

// logConfig logs the configuration served, with the line that says
// mcp-front serves: once nothing is left to fail at start, so that a
// refused start stays one line.
func (f *front) logConfig() {
	app.LogConfig(f.log, f.o.Config, f.cfg, "tools", toolNames(f.cfg), "grants", grantNames(f.cfg))
}

// serveStdio serves MCP on stdin and stdout until the client closes
// stdin or ctx ends.
func (f *front) serveStdio(ctx context.Context) error {
	f.log.Info("mcp-front serving MCP on stdio", "db", f.o.DB)
	if err := app.Announce(f.env, f.o.AddrFile, f.addrs); err != nil {
		return err
	}
	// The guard answers malformed lines itself, so one bad line from a
	// client does not end the session.
	in, out := mcpstdio.Guard(f.env.Stdin, f.env.Stdout, f.log)
	var t mcp.Transport = &mcp.IOTransport{Reader: in, Writer: out}
	if f.log.Enabled(ctx, slog.LevelDebug) {
		// Every JSON-RPC message, both ways, as a debug line on stderr.
		t = &mcp.LoggingTransport{Transport: t, Writer: debugLines{f.log}}
	}
	err := f.srv.Run(ctx, t)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, mcp.ErrConnectionClosed) {
		return fmt.Errorf("stdio: %w", err)
	}
	f.log.Info("mcp-front stopped")
	return nil
}
