// Package natsjs holds ticketrelay's use of NATS JetStream: the embedded
// server, the stream definition and the outbox publisher.
package natsjs

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures the nats-server the dispatcher runs when no
// external NATS URL is given.
type EmbeddedConfig struct {
	// Listen is host:port for clients (port 0 picks a free one). Loopback by
	// default so that the nats CLI on the same machine can look inside.
	Listen string
	// StoreDir holds the JetStream file store.
	StoreDir string
	// Users are the public user nkeys the server admits (see
	// LoadOrCreateSeed); a client without one of their seeds is refused at
	// connect. Empty: no authentication (tests of this package only: the
	// dispatcher always gives one).
	Users []string
}

// readyTimeout bounds the wait for a started server to accept clients.
const readyTimeout = 30 * time.Second

// StartEmbedded starts a nats-server with JetStream on a file store that
// fsyncs every write (sync_interval: always): an acknowledged publish has
// reached the disk, so it survives a power cut, not only a process crash.
func StartEmbedded(cfg EmbeddedConfig, log *slog.Logger) (*server.Server, error) {
	return StartEmbeddedContext(context.Background(), cfg, log)
}

// StartEmbeddedContext is StartEmbedded that gives up waiting for the server
// to accept clients when ctx ends. An address it cannot listen on (a port
// in use) is an error at once, not a timeout.
func StartEmbeddedContext(ctx context.Context, cfg EmbeddedConfig, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsjs: listen address %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("natsjs: listen port %q is not a port number", portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// nats-server only logs a failed listen and never becomes ready:
		// try the address first. (Should another process take it in
		// between, the server's fatal log line ends the wait below.)
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsjs: embedded server cannot listen on %s: %w", cfg.Listen, err)
		}
		ln.Close()
	}
	opts := &server.Options{
		ServerName: "ticketrelay-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		SyncAlways: true,
		NoSigs:     true, // the dispatcher owns signal handling
		// No HTTP monitoring port, no cluster, no leafnodes: a local broker.
	}
	for _, pub := range cfg.Users {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub})
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsjs: embedded server: %w", err)
	}
	fatal := make(chan string, 1)
	s.SetLoggerV2(&slogAdapter{log: log.With("component", "nats-server"), fatal: fatal}, false, false, false)
	s.Start()
	deadline := time.Now().Add(readyTimeout)
	for !s.ReadyForConnections(50 * time.Millisecond) {
		var err error
		select {
		case msg := <-fatal:
			err = fmt.Errorf("natsjs: embedded server on %s: %s", cfg.Listen, msg)
		case <-ctx.Done():
			err = fmt.Errorf("natsjs: embedded server on %s: stopped while starting: %w", cfg.Listen, ctx.Err())
		default:
			if time.Now().After(deadline) {
				err = fmt.Errorf("natsjs: embedded server on %s not ready after %s", cfg.Listen, readyTimeout)
			}
		}
		if err != nil {
			s.Shutdown()
			return nil, err
		}
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return nil, fmt.Errorf("natsjs: embedded server started without JetStream (store %s)", cfg.StoreDir)
	}
	return s, nil
}

// slogAdapter sends nats-server's log lines to slog (stderr), and the first
// fatal one (the server gave up, e.g. on its listen) to fatal.
type slogAdapter struct {
	log   *slog.Logger
	fatal chan<- string
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.log.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.log.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.log.Error(msg)
	select {
	case a.fatal <- msg:
	default:
	}
}
func (a *slogAdapter) Errorf(format string, v ...any) { a.log.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any) { a.log.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any) { a.log.Debug(fmt.Sprintf(format, v...)) }
