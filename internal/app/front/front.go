// Package front builds mcp-front from its flags: it is the one place where
// its configuration becomes components. cmd/mcp-front only calls Run.
package front

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"ticketrelay/internal/app"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/config"
	"ticketrelay/ledger"
	"ticketrelay/mcphttp"
	"ticketrelay/mcpstdio"
	"ticketrelay/mcptools"
	"ticketrelay/metrics"
)

// DefaultMaxConns bounds the connections mcp-front serves at once: no
// bound (0). A global bound is one any single client address can fill
// cheaply (one request, then 2 minutes idle per connection), leaving
// everyone else waiting to be accepted, and each session's GET stream
// holds a connection of its own. What bounds them is the process's file
// descriptor limit and httpIdleTimeout; -max-conns is there for an
// operator who wants a bound anyway (behind a proxy that spreads
// connections fairly, for instance).
const DefaultMaxConns = 0

// Run runs mcp-front until ctx is cancelled (or stdin closes, in stdio mode).
func Run(ctx context.Context, env app.Env) error {
	fs := flag.NewFlagSet("mcp-front", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var (
		dbPath         = fs.String("db", "data/tickets.db", "SQLite database `path` shared with the dispatcher")
		listen         = fs.String("listen", "127.0.0.1:8080", "streamable HTTP `address`; the endpoint is /mcp")
		metricsListen  = fs.String("metrics-listen", "127.0.0.1:9464", "Prometheus /metrics `address` (empty: off; off by default with -stdio)")
		stdio          = fs.Bool("stdio", false, "serve MCP over stdin/stdout instead of HTTP")
		configPath     = fs.String("config", "", "configuration `file` (targets and tools)")
		logLevel       = fs.String("log-level", "info", "log `level`: debug, info, warn, error (logs go to stderr)")
		allowedOrigins = fs.String("allowed-origins", "", "comma-separated browser `origins` allowed besides loopback")
		stateless      = fs.Bool("stateless", false, "serve streamable HTTP without sessions for every protocol version (behind a load balancer); "+
			"by default 2025-11-25 clients get sessions and 2026-07-28 clients are served statelessly")
		sessionTimeout = fs.Duration("session-timeout", mcphttp.DefaultSessionTimeout, "close HTTP sessions idle this `long`")
		eventBytes     = fs.Int("event-store-bytes", mcphttp.DefaultEventStoreBytes, "memory `bytes` kept for resuming dropped SSE streams with Last-Event-ID (0: no resumption)")
		keepAlive      = fs.Duration("keepalive", 30*time.Second, "ping `interval` on sessions holding a GET stream open (0: no pings)")
		keepAliveFails = fs.Int("keepalive-failures", mcphttp.DefaultKeepAliveFailures, "close a session after this `many` consecutive unanswered pings (sessions without a GET stream are never pinged)")
		maxBody        = fs.Int64("max-body-bytes", mcphttp.DefaultMaxBodyBytes, "largest HTTP request body in `bytes` (413 beyond); a body must arrive within 30 s per MiB of this, at least 30 s (408 beyond)")
		maxSessions    = fs.Int("max-sessions", mcphttp.DefaultMaxSessions, "live HTTP sessions at most (`n`); a new one beyond closes the oldest session that made no call since its initialize, or gets 503 if all made calls (0: no bound)")
		maxSubjectSess = fs.Int("max-sessions-per-subject", mcphttp.DefaultMaxSessionsPerSubject, "live HTTP sessions at most per bearer-token subject (`n`); a new one beyond closes the subject's oldest session that made no call, or gets 429 if all made calls (0: no bound)")
		maxAddrSess    = fs.Int("max-sessions-per-address", mcphttp.DefaultMaxSessionsPerAddress, "live HTTP sessions at most per client address (IPv4, or IPv6 /64) of requests without a token (`n`); a new one beyond closes the address's oldest session that made no call, or gets 429 if all made calls (0: no bound). Behind a proxy without tokens every client shares its address")
		unusedTimeout  = fs.Duration("session-unused-timeout", mcphttp.DefaultUnusedSessionTimeout, "close an HTTP session that made no call since its initialize after this `long` (0: only -session-timeout); a session that made a call is never closed for it")
		maxConns       = fs.Int("max-conns", DefaultMaxConns, "HTTP connections served at once (`n`); more wait to be accepted. 0 (default): no bound; beware that one client address can hold every slot of a bound, and each session's GET stream holds one")
		tokensFile     = fs.String("auth-tokens-file", "", "bearer tokens `file`: one \"subject:token\" (or bare token) per line; required to listen beyond loopback")
		tokensEnv      = fs.String("auth-tokens-env", "TICKETRELAY_AUTH_TOKENS", "environment `variable` holding bearer tokens, \"subject:token\" entries separated by commas")
		authResource   = fs.String("auth-resource", "", "canonical `URL` of this endpoint (https://host/mcp): with -auth-servers, serves OAuth protected-resource metadata")
		authServers    = fs.String("auth-servers", "", "comma-separated OAuth authorization server `URLs` for the protected-resource metadata")
		insecure       = fs.Bool("insecure", false, "allow listening beyond loopback without bearer tokens, and -metrics-listen beyond loopback (/metrics has no authentication)")
		authFailures   = fs.Int("auth-failures", mcphttp.DefaultAuthFailureLimit.Burst, "requests without a valid token one client address may send in a row (`n`); then all its requests get 429, allowing one failure per second (0: no limit)")
		rateLimit      = fs.Float64("rate-limit", -1, "HTTP requests per second per client (token subject or IP); 0: no limit; default -1 means 20 when -listen is beyond loopback, no limit on loopback")
		rateBurst      = fs.Int("rate-burst", 0, "requests a client may send at once (default 2×rate-limit)")
		addrFile       = fs.String("addr-file", "", "write the listening addresses as JSON to this `file` once serving (for scripts and tests)")
		multiHost      = fs.Bool("multi-host", false, "one of several hosts of an installation: acceptance is decided by the cluster record on -nats before this host commits (needs -nats and -installation)")
		natsURL        = fs.String("nats", "", "with -multi-host: `URL`s of the installation's NATS cluster")
		installName    = fs.String("installation", "", "with -multi-host: the installation's `name` (as its dispatchers')")
		benchNoop      = fs.Bool("bench-noop-tool", false, "for benchmarks only: also serve "+mcptools.NoopToolPrefix+"<tool>, a twin of each create tool that validates its arguments and writes nothing")
	)
	natsFlags := app.AddNATSFlags(fs, natsURL)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: mcp-front [flags]\n\nServes the ticketrelay MCP tools (create_ticket, find_request).\n\n")
		fs.PrintDefaults()
	}
	set, log, help, err := app.ParseStart(fs, env, logLevel)
	if help || err != nil {
		return err
	}
	for _, n := range []*int{maxSessions, maxSubjectSess, maxAddrSess, maxConns, authFailures} {
		if *n < 0 {
			return fmt.Errorf("%w: -max-sessions, -max-sessions-per-subject, -max-sessions-per-address, -max-conns and -auth-failures take a count ≥ 0", app.ErrUsage)
		}
	}
	if *unusedTimeout < 0 {
		return fmt.Errorf("%w: -session-unused-timeout takes a duration ≥ 0", app.ErrUsage)
	}
	if err := natsFlags.Check(env.Lookup); err != nil {
		return err
	}
	if *stdio && !set["metrics-listen"] {
		*metricsListen = "" // several stdio instances must not race for one port
	}
	if err := app.CheckMetricsListen(*metricsListen, *insecure, log); err != nil {
		return err
	}
	// The front only needs the file's shape (tools, targets' kinds), never
	// the downstream credentials.
	cfg, err := config.Load(*configPath, nil)
	if err != nil {
		return err
	}
	toolBindings, err := bindings(cfg)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(filepath.Dir(*dbPath), 0o700); err != nil {
		return fmt.Errorf("database directory: %w", err)
	}
	db, err := ledger.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	reg := app.NewRegistry()
	m := metrics.NewFront(reg)
	w := ledger.NewWriter(db, log, m.Writer)
	defer w.Close()
	l := ledger.New(db, w, time.Now)
	var requests mcptools.Requests = l
	if *multiHost {
		natsOpts, err := natsFlags.Options(env.Lookup)
		if err != nil {
			return err
		}
		front, closeNATS, err := joinCluster(ctx, *natsURL, *installName, natsOpts, l, log)
		if err != nil {
			return err
		}
		defer closeNATS()
		requests = front
	}
	srv, err := mcptools.New(mcptools.Config{Version: app.Version, Bindings: toolBindings}, requests, m, log)
	if err != nil {
		return err
	}
	if *benchNoop {
		for _, b := range toolBindings {
			log.Warn("benchmark no-op tool enabled: it stores nothing", "tool", mcptools.AddNoopTool(srv, b, log))
		}
	}

	addrs := map[string]string{}
	stopMetrics, err := app.ServeMetrics(ctx, *metricsListen, reg, log, addrs)
	if err != nil {
		return err
	}
	defer stopMetrics()

	if *stdio {
		log.Info("mcp-front serving MCP on stdio", "db", *dbPath)
		if err := app.Announce(env, *addrFile, addrs); err != nil {
			return err
		}
		// The guard answers malformed lines itself, so one bad line from a
		// client does not end the session.
		in, out := mcpstdio.Guard(env.Stdin, env.Stdout, log)
		var t mcp.Transport = &mcp.IOTransport{Reader: in, Writer: out}
		if log.Enabled(ctx, slog.LevelDebug) {
			// Every JSON-RPC message, both ways, as a debug line on stderr.
			t = &mcp.LoggingTransport{Transport: t, Writer: debugLines{log}}
		}
		err := srv.Run(ctx, t)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, mcp.ErrConnectionClosed) {
			return fmt.Errorf("stdio: %w", err)
		}
		log.Info("mcp-front stopped")
		return nil
	}

	authCfg, err := frontAuth(env, *tokensFile, *tokensEnv, *authResource, app.SplitList(*authServers))
	if err != nil {
		return err
	}
	loopback := app.IsLoopbackListen(*listen)
	switch {
	case authCfg != nil:
		log.Info("bearer-token authentication on", "subjects", authCfg.Tokens.Subjects())
		authCfg.FailureLimit = mcphttp.RateLimit{PerSecond: -1}
		if *authFailures > 0 {
			authCfg.FailureLimit = mcphttp.RateLimit{PerSecond: mcphttp.DefaultAuthFailureLimit.PerSecond, Burst: *authFailures}
		}
	case !loopback && !*insecure:
		return fmt.Errorf("%w: refusing to serve %s beyond loopback without authentication: give -auth-tokens-file or $%s, or pass -insecure",
			app.ErrUsage, *listen, *tokensEnv)
	case !loopback:
		log.Warn("serving beyond loopback WITHOUT authentication (-insecure)", "listen", *listen)
	}
	limit := mcphttp.RateLimit{PerSecond: *rateLimit, Burst: *rateBurst}
	if *rateLimit < 0 {
		limit.PerSecond = 0
		if !loopback {
			limit.PerSecond = 20
		}
	}
	if *eventBytes <= 0 {
		*eventBytes = -1
	}
	for _, n := range []*int{maxSessions, maxSubjectSess, maxAddrSess} {
		if *n == 0 {
			*n = -1 // no bound
		}
	}
	if *unusedTimeout == 0 {
		*unusedTimeout = -1 // none
	}
	for _, reason := range mcphttp.EvictedReasons {
		m.HTTPSessionsEvicted.WithLabelValues(reason) // exported at 0 from the start
	}
	h := mcphttp.NewHandler(srv, mcphttp.Config{
		AllowedOrigins:        app.SplitList(*allowedOrigins),
		Stateless:             *stateless,
		SessionTimeout:        *sessionTimeout,
		EventStoreBytes:       *eventBytes,
		KeepAlive:             *keepAlive,
		KeepAliveFailures:     *keepAliveFails,
		MaxBodyBytes:          *maxBody,
		MaxSessions:           *maxSessions,
		MaxSessionsPerSubject: *maxSubjectSess,
		MaxSessionsPerAddress: *maxAddrSess,
		UnusedSessionTimeout:  *unusedTimeout,
		Auth:                  authCfg,
		RateLimit:             limit,
		Refused:               func(reason string) { m.HTTPRefused.WithLabelValues(reason).Inc() },
		Evicted:               func(reason string) { m.HTTPSessionsEvicted.WithLabelValues(reason).Inc() },
		Logger:                log,
	})
	defer h.Close()
	metrics.SessionsFunc(reg, h.Sessions)
	mux := httpMux(h)
	if authCfg != nil && authCfg.Resource != "" {
		_, path, _ := mcphttp.ResourceMetadataLocation(authCfg.Resource)
		mux.Handle(path, mcphttp.ResourceMetadataHandler(authCfg))
		if path != "/.well-known/oauth-protected-resource" {
			mux.Handle("/.well-known/oauth-protected-resource", mcphttp.ResourceMetadataHandler(authCfg))
		}
	}
	hs, err := app.ServeLimits(ctx, *listen, mux, log, app.HTTPLimits{MaxConns: *maxConns})
	if err != nil {
		return err
	}
	addrs["mcp"] = hs.Addr
	log.Info("mcp-front serving MCP over streamable HTTP", "url", "http://"+hs.Addr+"/mcp", "metrics", addrs["metrics"], "db", *dbPath)
	if err := app.Announce(env, *addrFile, addrs); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("mcp-front shutting down")
	return hs.Shutdown(5 * time.Second)
}
