// Package natsjs holds ticketrelay's use of NATS JetStream: the embedded
// server, the stream definition and the outbox publisher.
package natsjs

import (
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
}

// StartEmbedded starts a nats-server with JetStream on a file store that
// fsyncs every write (sync_interval: always): an acknowledged publish has
// reached the disk, so it survives a power cut, not only a process crash.
func StartEmbedded(cfg EmbeddedConfig, log *slog.Logger) (*server.Server, error) {
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
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsjs: embedded server: %w", err)
	}
	s.SetLoggerV2(&slogAdapter{log: log.With("component", "nats-server")}, false, false, false)
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("natsjs: embedded server on %s not ready after 30s", cfg.Listen)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return nil, fmt.Errorf("natsjs: embedded server started without JetStream (store %s)", cfg.StoreDir)
	}
	return s, nil
}

// slogAdapter sends nats-server's log lines to slog (stderr).
type slogAdapter struct{ log *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.log.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.log.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.log.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.log.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.log.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.log.Debug(fmt.Sprintf(format, v...)) }
