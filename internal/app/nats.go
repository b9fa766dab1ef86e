package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"ticketrelay/internal/flagenv"
)

// The connection to an external NATS server, for the dispatcher (-nats) and
// for mcp-front in multi-host mode: credentials, TLS, and the wait for a
// server that cannot be reached yet.

// natsPasswordEnv holds the password of -nats-user. It has no flag: a
// flag's value is in the process list for every local user to read.
const natsPasswordEnv = flagenv.Prefix + "NATS_PASSWORD"

// NATSFlags are the flags of a connection to an external NATS server
// (-nats): its credentials and TLS settings. Both processes take them.
type NATSFlags struct {
	url, creds, user, tlsCA, tlsCert, tlsKey *string
}

func AddNATSFlags(fs *flag.FlagSet, natsURL *string) NATSFlags {
	return NATSFlags{
		url: natsURL,
		creds: fs.String("nats-creds", "", "credentials `file` for -nats: a user JWT with its nkey seed (as nsc generate creds writes it), "+
			"or an nkey seed alone"),
		user: fs.String("nats-user", "", "user `name` for -nats; its password is read from "+natsPasswordEnv+" only (never a flag: "+
			"the process list shows flags)"),
		tlsCA:   fs.String("nats-tls-ca", "", "CA certificate `file` that signs the -nats server's certificate (default: the system's)"),
		tlsCert: fs.String("nats-tls-cert", "", "client certificate `file` for -nats (with -nats-tls-key)"),
		tlsKey:  fs.String("nats-tls-key", "", "client private key `file` for -nats (with -nats-tls-cert)"),
	}
}

// Check refuses a -nats URL that carries credentials (the process list
// shows them) and connection flags that do not apply.
func (b NATSFlags) Check(lookup func(string) (string, bool)) error {
	external := *b.url != ""
	for _, f := range []struct{ name, v string }{{"-nats-creds", *b.creds}, {"-nats-user", *b.user},
		{"-nats-tls-ca", *b.tlsCA}, {"-nats-tls-cert", *b.tlsCert}, {"-nats-tls-key", *b.tlsKey}} {
		if f.v != "" && !external {
			return fmt.Errorf("%w: %s applies to an external server (-nats URL); the embedded one uses the credentials in the data directory", ErrUsage, f.name)
		}
	}
	for _, s := range SplitList(*b.url) {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			// Not echoed: a mistyped URL may still hold a password.
			return fmt.Errorf("%w: -nats: not a URL like nats://host:4222", ErrUsage)
		}
		if u.User != nil {
			return fmt.Errorf("%w: -nats %s://%s carries credentials, which any local user can read in the process list: "+
				"use -nats-creds FILE, or -nats-user NAME with the password in %s", ErrUsage, u.Scheme, u.Host, natsPasswordEnv)
		}
	}
	if (*b.tlsCert == "") != (*b.tlsKey == "") {
		return fmt.Errorf("%w: -nats-tls-cert and -nats-tls-key go together", ErrUsage)
	}
	if _, ok := lookup(natsPasswordEnv); ok && *b.user == "" {
		return fmt.Errorf("%w: %s is set but -nats-user is not", ErrUsage, natsPasswordEnv)
	}
	if *b.creds != "" && *b.user != "" {
		return fmt.Errorf("%w: -nats-creds and -nats-user: give one of them", ErrUsage)
	}
	return nil
}

// Options are the nats.go options of the external server's credentials and
// TLS settings.
func (b NATSFlags) Options(lookup func(string) (string, bool)) ([]nats.Option, error) {
	var opts []nats.Option
	if *b.creds != "" {
		raw, err := os.ReadFile(*b.creds)
		if err != nil {
			return nil, fmt.Errorf("-nats-creds: %w", err)
		}
		if strings.Contains(string(raw), "BEGIN NATS USER JWT") {
			opts = append(opts, nats.UserCredentials(*b.creds))
		} else {
			o, err := nats.NkeyOptionFromSeed(*b.creds)
			if err != nil {
				return nil, fmt.Errorf("-nats-creds %s: neither a credentials file nor an nkey seed: %w", *b.creds, err)
			}
			opts = append(opts, o)
		}
	}
	if *b.user != "" {
		pw, _ := lookup(natsPasswordEnv)
		opts = append(opts, nats.UserInfo(*b.user, pw))
	}
	if *b.tlsCA != "" {
		opts = append(opts, nats.RootCAs(*b.tlsCA))
	}
	if *b.tlsCert != "" {
		opts = append(opts, nats.ClientCert(*b.tlsCert, *b.tlsKey))
	}
	return opts, nil
}

// A hung server is given up after about pingInterval × maxPingsOut.
const (
	pingInterval = 2 * time.Second
	maxPingsOut  = 3
)

// ConnectNATS connects to url and waits until the connection is up:
// meanwhile it says within a second that it waits, naming the URL and the
// cause, and again every brokerWaitLogEvery. It returns ctx.Err() if ctx
// ends first.
func ConnectNATS(ctx context.Context, url, name string, extra []nats.Option, log *slog.Logger) (*nats.Conn, error) {
	var lastErr atomic.Pointer[error]
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		// A server that hangs (SIGSTOP, a cut link) keeps the TCP
		// connection open: only unanswered pings tell. nats.go's default
		// (every 2 minutes, 2 outstanding) left a client stuck on a hung
		// node of a cluster for minutes while the other nodes served.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: the connection was closed on purpose (shutdown)
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				lastErr.Store(&err)
			}
		}),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", url, err)
	}
	cause := func() error {
		if p := lastErr.Load(); p != nil && !errors.Is(*p, nats.ErrNoServers) {
			return *p
		}
		if err := nc.LastError(); err != nil && !errors.Is(err, nats.ErrNoServers) {
			return err
		}
		// nats.go reports a refused connection as "no servers available":
		// ask the network what is wrong.
		return probe(url)
	}
	if err := waitConnected(ctx, nc, url, cause, log); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// brokerWaitFirstLog is how long a connection may take before the
// process says it waits; brokerWaitLogEvery spaces the repeats.
const (
	brokerWaitFirstLog = 500 * time.Millisecond
	brokerWaitLogEvery = 30 * time.Second
)

func waitConnected(ctx context.Context, nc *nats.Conn, url string, cause func() error, log *slog.Logger) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	var warned time.Time
	for !nc.IsConnected() {
		if since := time.Since(began); since >= brokerWaitFirstLog && (warned.IsZero() || time.Since(warned) >= brokerWaitLogEvery) {
			warned = time.Now()
			log.Warn("waiting for the NATS server: cannot connect; retrying every second", "url", url, "cause", cause(),
				"waiting", since.Round(100*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if !warned.IsZero() {
		log.Info("connected to the NATS server", "url", nc.ConnectedUrlRedacted(), "after", time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// probe dials the first server of url once, for the network's account of
// why it cannot be reached.
func probe(list string) error {
	first, _, _ := strings.Cut(list, ",")
	u, err := url.Parse(strings.TrimSpace(first))
	if err != nil {
		return err
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	c, err := net.DialTimeout("tcp", host, 400*time.Millisecond)
	if err != nil {
		return err
	}
	c.Close()
	return errors.New("the server accepts TCP connections but the NATS handshake has not completed (TLS or credentials?)")
}
