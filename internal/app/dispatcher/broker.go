package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"ticketrelay/internal/app"
	"ticketrelay/internal/flagenv"
	"ticketrelay/natsjs"
)

// The connection to the broker: credentials for an external server (-nats)
// and for the embedded one, and the wait for a server that cannot be
// reached yet.

// natsPasswordEnv holds the password of -nats-user. It has no flag: a
// flag's value is in the process list for every local user to read.
const natsPasswordEnv = flagenv.Prefix + "NATS_PASSWORD"

// brokerFlags are the flags of a connection to an external server.
type brokerFlags struct {
	url, creds, user, tlsCA, tlsCert, tlsKey *string
}

func addBrokerFlags(fs *flag.FlagSet, natsURL *string) brokerFlags {
	return brokerFlags{
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

// check refuses a -nats URL that carries credentials (the process list
// shows them) and connection flags that do not apply.
func (b brokerFlags) check(lookup func(string) (string, bool)) error {
	external := *b.url != ""
	for _, f := range []struct{ name, v string }{{"-nats-creds", *b.creds}, {"-nats-user", *b.user},
		{"-nats-tls-ca", *b.tlsCA}, {"-nats-tls-cert", *b.tlsCert}, {"-nats-tls-key", *b.tlsKey}} {
		if f.v != "" && !external {
			return fmt.Errorf("%w: %s applies to an external server (-nats URL); the embedded one uses the credentials in the data directory", app.ErrUsage, f.name)
		}
	}
	for _, s := range app.SplitList(*b.url) {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			// Not echoed: a mistyped URL may still hold a password.
			return fmt.Errorf("%w: -nats: not a URL like nats://host:4222", app.ErrUsage)
		}
		if u.User != nil {
			return fmt.Errorf("%w: -nats %s://%s carries credentials, which any local user can read in the process list: "+
				"use -nats-creds FILE, or -nats-user NAME with the password in %s", app.ErrUsage, u.Scheme, u.Host, natsPasswordEnv)
		}
	}
	if (*b.tlsCert == "") != (*b.tlsKey == "") {
		return fmt.Errorf("%w: -nats-tls-cert and -nats-tls-key go together", app.ErrUsage)
	}
	if _, ok := lookup(natsPasswordEnv); ok && *b.user == "" {
		return fmt.Errorf("%w: %s is set but -nats-user is not", app.ErrUsage, natsPasswordEnv)
	}
	if *b.creds != "" && *b.user != "" {
		return fmt.Errorf("%w: -nats-creds and -nats-user: give one of them", app.ErrUsage)
	}
	return nil
}

// options are the nats.go options of the external server's credentials and
// TLS settings.
func (b brokerFlags) options(lookup func(string) (string, bool)) ([]nats.Option, error) {
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

// embeddedAuth makes (at the first start) or reads the seed the embedded
// server admits, and returns its public key and the client option that
// uses it.
func embeddedAuth(dataDir string) (pub string, opt nats.Option, seedPath string, err error) {
	seedPath, err = filepath.Abs(filepath.Join(dataDir, natsjs.SeedFile))
	if err != nil {
		return "", nil, "", fmt.Errorf("broker credentials: %w", err)
	}
	if pub, err = natsjs.LoadOrCreateSeed(seedPath); err != nil {
		return "", nil, "", err
	}
	if opt, err = nats.NkeyOptionFromSeed(seedPath); err != nil {
		return "", nil, "", fmt.Errorf("broker credentials: %w", err)
	}
	return pub, opt, seedPath, nil
}

// brokerInfoFile, in the data directory, tells `dispatcher status` where the
// embedded server listens and which credential opens it.
const brokerInfoFile = "nats.json"

type brokerInfo struct {
	URL    string `json:"url"`
	Nkey   string `json:"nkey"`
	Stream string `json:"stream"`
}

func writeBrokerInfo(dataDir string, bi brokerInfo) error {
	b, err := json.Marshal(bi)
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, brokerInfoFile)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("%s: %w", brokerInfoFile, err)
	}
	return os.Rename(path+".tmp", path)
}

// printBrokerHint prints how to point the nats CLI at the embedded server
// the dispatcher of dataDir last ran; nothing if it runs none.
func printBrokerHint(out io.Writer, dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, brokerInfoFile))
	if err != nil {
		return
	}
	var bi brokerInfo
	if json.Unmarshal(b, &bi) != nil || bi.URL == "" {
		return
	}
	fmt.Fprintf(out, "\nembedded nats-server (as last started): %s, credential %s (an nkey seed: keep it private)\n"+
		"  nats --server %s --nkey %s stream info %s\n", bi.URL, bi.Nkey, bi.URL, bi.Nkey, bi.Stream)
}

// connectBroker connects to url and waits until the connection is up:
// meanwhile it says within a second that it waits, naming the URL and the
// cause, and again every brokerWaitLogEvery. It returns ctx.Err() if ctx
// ends first.
func connectBroker(ctx context.Context, url string, extra []nats.Option, log *slog.Logger) (*nats.Conn, error) {
	var lastErr atomic.Pointer[error]
	opts := append([]nats.Option{
		nats.Name("ticketrelay-dispatcher"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
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
// dispatcher says it waits; brokerWaitLogEvery spaces the repeats.
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
