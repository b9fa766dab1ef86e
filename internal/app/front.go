package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/config"
	"ticketrelay/internal/failpoint"
	"ticketrelay/internal/flagenv"
	"ticketrelay/ledger"
	"ticketrelay/mcpserver"
	"ticketrelay/metrics"
)

// ErrUsage marks a command-line error (exit status 2).
var ErrUsage = errors.New("usage")

// RunFront runs mcp-front until ctx is cancelled (or stdin closes, in stdio mode).
func RunFront(ctx context.Context, env Env) error {
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
		stateless      = fs.Bool("stateless", false, "serve streamable HTTP without sessions")
		addrFile       = fs.String("addr-file", "", "write the listening addresses as JSON to this `file` once serving (for scripts and tests)")
		benchNoop      = fs.Bool("bench-noop-tool", false, "for benchmarks only: also serve "+mcpserver.NoopToolPrefix+"<tool>, a twin of each create tool that validates its arguments and writes nothing")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: mcp-front [flags]\n\nServes the ticketrelay MCP tools (create_ticket, find_request).\n\n")
		fs.PrintDefaults()
	}
	set, err := flagenv.Parse(fs, env.Args, env.Lookup)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if err := failpoint.Init(); err != nil {
		return err
	}
	log, err := newLogger(env.Stderr, *logLevel)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if *stdio && !set["metrics-listen"] {
		*metricsListen = "" // several stdio instances must not race for one port
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

	if err := os.MkdirAll(filepath.Dir(*dbPath), 0o755); err != nil {
		return fmt.Errorf("database directory: %w", err)
	}
	db, err := ledger.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	reg := newRegistry()
	m := metrics.NewFront(reg)
	w := ledger.NewWriter(db, log, m.Writer)
	defer w.Close()
	l := ledger.New(db, w, time.Now)
	srv, err := mcpserver.New(mcpserver.Config{Version: Version, Bindings: toolBindings}, l, m, log)
	if err != nil {
		return err
	}
	if *benchNoop {
		for _, b := range toolBindings {
			log.Warn("benchmark no-op tool enabled: it stores nothing", "tool", mcpserver.AddNoopTool(srv, b, m, log))
		}
	}

	addrs := map[string]string{}
	if *metricsListen != "" {
		ms, err := serve(ctx, *metricsListen, metricsHandler(reg), log)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		defer ms.shutdown(2 * time.Second)
		addrs["metrics"] = ms.addr
	}

	if *stdio {
		log.Info("mcp-front serving MCP on stdio", "db", *dbPath)
		if err := announce(env, *addrFile, addrs); err != nil {
			return err
		}
		err := srv.Run(ctx, &mcp.IOTransport{Reader: nopReadCloser{env.Stdin}, Writer: nopWriteCloser{env.Stdout}})
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, mcp.ErrConnectionClosed) {
			return fmt.Errorf("stdio: %w", err)
		}
		log.Info("mcp-front stopped")
		return nil
	}

	h := mcpserver.NewHTTPHandler(srv, mcpserver.HTTPConfig{
		AllowedOrigins: splitList(*allowedOrigins),
		Stateless:      *stateless,
		Logger:         log,
	})
	mux := httpMux(h)
	hs, err := serve(ctx, *listen, mux, log)
	if err != nil {
		return err
	}
	addrs["mcp"] = hs.addr
	log.Info("mcp-front serving MCP over streamable HTTP", "url", "http://"+hs.addr+"/mcp", "metrics", addrs["metrics"], "db", *dbPath)
	if err := announce(env, *addrFile, addrs); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("mcp-front shutting down")
	return hs.shutdown(5 * time.Second)
}
