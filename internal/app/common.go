// Package app is what both processes share: their environment (Env), the
// run loop with its signals and exit statuses (Main), flag parsing with
// environment twins, logging, metrics registry and HTTP listeners, and the
// garbage-collector settings. Each process's wiring is a package of its own
// (internal/app/front, internal/app/dispatcher), so that neither binary
// links the other's dependencies: the dispatcher has no MCP SDK in it, and
// mcp-front no nats-server.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ticketrelay/internal/flagenv"
	"ticketrelay/tracing"
)

// ErrUsage marks a command-line error (exit status ExitUsage).
var ErrUsage = errors.New("usage")

// Version is set at build time (-ldflags "-X ticketrelay/internal/app.Version=…").
var Version = "dev"

// Env gives a process its outside world, so tests can run it in-process.
type Env struct {
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer // JSON-RPC only, in stdio mode
	Stderr io.Writer // all logs
	Lookup func(string) (string, bool)
	// Ready, if set, is called with the addresses the process listens on once
	// it serves (keys: "mcp", "metrics", "nats").
	Ready func(addrs map[string]string)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	// A line logged with a request's context names its trace (tracing).
	return slog.New(tracing.LogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))), nil
}

// NewRegistry is a metrics registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Limits of every HTTP server of both processes.
const (
	// httpReadHeaderTimeout bounds the time to send a request's headers.
	httpReadHeaderTimeout = 10 * time.Second
	// httpIdleTimeout closes a keep-alive connection with no request for
	// this long. It applies only between requests: a long SSE stream or a
	// call waiting for delivery (≤ 45 s) is a request in progress, never
	// cut. There is no WriteTimeout, which would cut SSE streams.
	httpIdleTimeout = 2 * time.Minute
	// httpMaxHeaderBytes bounds a request's headers (431 beyond).
	httpMaxHeaderBytes = 64 << 10
)

// Server is an HTTP server on a listener, shut down when ctx ends.
type Server struct {
	Addr string // the address it listens on
	srv  *http.Server
	done chan error
}

// Serve serves h on addr with the default limits.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	return ServeLimits(ctx, addr, h, log, HTTPLimits{})
}

// HTTPLimits are the limits of a server; zero values take the defaults above.
type HTTPLimits struct {
	MaxConns int           // connections open at once; ≤ 0: no bound
	Idle     time.Duration // httpIdleTimeout
}

// ServeLimits is Serve with lim. With lim.MaxConns, new connections beyond
// it wait in the kernel's accept queue until one closes.
func ServeLimits(ctx context.Context, addr string, h http.Handler, log *slog.Logger, lim HTTPLimits) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	if lim.MaxConns > 0 {
		ln = newLimitListener(ln, lim.MaxConns)
	}
	if lim.Idle <= 0 {
		lim.Idle = httpIdleTimeout
	}
	s := &Server{
		Addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: httpReadHeaderTimeout,
			IdleTimeout:       lim.Idle,
			MaxHeaderBytes:    httpMaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		},
		done: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Shutdown stops accepting, lets running requests finish for up to grace,
// then closes what is left (long-lived SSE streams).
func (s *Server) Shutdown(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	return <-s.done
}

// limitListener accepts at most cap(sem) connections at once: Accept waits
// for one to close (as golang.org/x/net/netutil.LimitListener does).
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// ServeMetrics serves metricsHandler(reg) on addr, unless addr is empty, and
// records where it listens in addrs["metrics"]. stop shuts it down.
func ServeMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger, addrs map[string]string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	s, err := Serve(ctx, addr, metricsHandler(reg), log)
	if err != nil {
		return nil, ListenError("metrics-listen", addr, err)
	}
	addrs["metrics"] = s.Addr
	return func() { s.Shutdown(2 * time.Second) }, nil
}

// metricsHandler serves /metrics from reg and /healthz.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Announce reports the listening addresses to the in-process caller and, if
// asked, writes them atomically to addrFile as a JSON object.
func Announce(env Env, addrFile string, addrs map[string]string) error {
	if env.Ready != nil {
		env.Ready(addrs)
	}
	if addrFile == "" {
		return nil
	}
	b, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	tmp := addrFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("-addr-file: %w", err)
	}
	return os.Rename(tmp, addrFile)
}

// IsLoopbackListen reports whether a listen address ("host:port") accepts
// only loopback connections: 127.0.0.0/8, ::1 or "localhost". An empty host
// (all interfaces) or any other name is not loopback.
func IsLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckMetricsListen refuses a -metrics-listen address beyond loopback
// unless insecure, as mcp-front refuses its MCP listener without tokens:
// /metrics has no authentication, and says which targets fail, which
// subjects are refused and how busy the service is. With insecure it logs
// a warning and allows it. An empty address (metrics off) passes.
func CheckMetricsListen(addr string, insecure bool, log *slog.Logger) error {
	if addr == "" || IsLoopbackListen(addr) {
		return nil
	}
	if !insecure {
		return fmt.Errorf("%w: refusing to serve /metrics on %s beyond loopback: it has no authentication; "+
			"listen on loopback and let the scraper reach it through a proxy or tunnel, or pass -insecure", ErrUsage, addr)
	}
	log.Warn("serving /metrics beyond loopback WITHOUT authentication (-insecure)", "metrics_listen", addr)
	return nil
}

// ListenError is the error of a listener a flag asked for and the process
// could not open: it names the flag, and for a port in use (the common
// case: another instance, or another program on a default port) says that
// in one line with the way to choose another, instead of the socket call's
// text.
func ListenError(flagName, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return &listenError{err: err, msg: fmt.Sprintf("-%s %s: the port is in use by another process; choose another with -%s HOST:PORT (or $%s)",
			flagName, addr, flagName, flagenv.EnvName(flagName))}
	}
	return &listenError{err: err, msg: fmt.Sprintf("-%s %s: %v", flagName, addr, err)}
}

type listenError struct {
	msg string
	err error
}

func (e *listenError) Error() string { return e.msg }
func (e *listenError) Unwrap() error { return e.err }
