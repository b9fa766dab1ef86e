package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"ticketrelay/console"
	"ticketrelay/front/mcpauth"
	"ticketrelay/internal/app"
	"ticketrelay/internal/operate"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/ticket"
)

// serveConsole serves the operator console on -console-listen (none if
// empty), over this host's ledger and forwarders, and with -multi-host
// the installation's cluster view.
func (d *dispatcher) serveConsole(ctx context.Context) error {
	if d.o.ConsoleListen == "" {
		return nil
	}
	cfg := console.Config{Store: d.l, Live: d.fwd.Live, Log: d.log.With("component", "console"), Now: d.arch.Now,
		Loopback: app.IsLoopbackListen(d.o.ConsoleListen), Trail: operate.TrailRecorder{Store: d.trail}}
	if d.o.ConsoleTokens != "" {
		b, err := os.ReadFile(d.o.ConsoleTokens)
		if err != nil {
			return fmt.Errorf("-console-tokens-file: %w", err)
		}
		tokens, err := mcpauth.ParseTokens(d.o.ConsoleTokens, string(b))
		if err != nil {
			return fmt.Errorf("%w: %v", app.ErrUsage, err)
		}
		if tokens.Len() == 0 {
			return fmt.Errorf("%w: -console-tokens-file %s holds no token", app.ErrUsage, d.o.ConsoleTokens)
		}
		cfg.SignIn = console.Tokens(tokens)
	}
	if d.o.ConsoleOAuth.Issuer != "" {
		o, err := d.consoleOAuth(ctx)
		if err != nil {
			return err
		}
		cfg.OAuth = o
	}
	if cfg.SignIn == nil && cfg.OAuth == nil && !app.IsLoopbackListen(d.o.ConsoleListen) {
		d.log.Warn("serving the operator console beyond loopback WITHOUT sign-in (-insecure)", "console_listen", d.o.ConsoleListen)
	}
	if store := d.clusterStore; store != nil {
		inst, dead := d.stream.Installation, d.o.HostDeadAfter
		cfg.Cluster = func(ctx context.Context) *operate.ClusterView {
			v := operate.LookAtCluster(ctx, d.js, store, inst, dead, d.arch.Now())
			return &v
		}
		cfg.Hosts = forgetter{store}
		cp := clusterrec.NewCopy(store, d.js, d.l, d.log.With("component", "console-copy"), d.arch.Now)
		cfg.Whole = &console.Whole{Host: store.Host(), Copy: d.l, State: cp.State, ConsoleOf: store.ConsoleOf,
			Record: func(ctx context.Context, id string) (request.Report, ticket.Ticket, string, bool, error) {
				st, rec, found, err := store.Report(ctx, id)
				return st, rec.Ticket, rec.Host, found, err
			}}
		d.services["console-copy"] = func(ctx context.Context) error { return cp.Run(ctx, clusterrec.CopyConfig{}) }
	}
	c, err := console.New(cfg)
	if err != nil {
		return err
	}
	s, err := app.Serve(ctx, d.o.ConsoleListen, c.Handler(), d.log)
	if errors.Is(err, syscall.EADDRINUSE) && d.o.ConsoleListen == DefaultConsoleListen {
		// Several dispatchers on one host (make run-cluster, tests): the
		// first has the console; the others deliver all the same.
		d.log.Warn("the operator console's default address is in use (another dispatcher on this host?): no console here; give -console-listen HOST:PORT for one",
			"console_listen", d.o.ConsoleListen)
		return nil
	}
	if err != nil {
		return app.ListenError("console-listen", d.o.ConsoleListen, err)
	}
	d.OnClose(func() { s.Shutdown(2 * time.Second) })
	d.addrs["console"] = s.Addr
	d.services["console"] = c.Run
	if store := d.clusterStore; store != nil {
		d.services["console-address"] = publishConsole(store, cmp.Or(d.o.ConsoleURL, "http://"+s.Addr), d.log)
	}
	return nil
}

// consoleOAuth is the console's sign-in at -console-oauth-issuer: the
// access token is validated as mcp-front validates an agent's, for the
// console's own audience.
func (d *dispatcher) consoleOAuth(ctx context.Context) (*console.OAuth, error) {
	c := d.o.ConsoleOAuth
	b, err := os.ReadFile(c.ClientSecretFile)
	if err != nil {
		return nil, fmt.Errorf("-console-oauth-client-secret-file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return nil, fmt.Errorf("%w: -console-oauth-client-secret-file %s is empty", app.ErrUsage, c.ClientSecretFile)
	}
	log := d.log.With("component", "console")
	v, err := mcpauth.New(mcpauth.Config{Issuer: c.Issuer, Audience: cmp.Or(c.Audience, d.o.ConsoleURL), Logger: log, Now: d.arch.Now})
	if err != nil {
		return nil, fmt.Errorf("%w: -console-oauth-*: %v", app.ErrUsage, err)
	}
	// The keys now, so that the first sign-in does not wait for them; an
	// issuer down at startup is fetched from again at the first sign-in.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := v.Refresh(rctx); err != nil {
		log.Warn("the console's OAuth issuer's keys could not be fetched; again at the first sign-in", "issuer", c.Issuer, "err", err)
	}
	return &console.OAuth{
		Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: secret, Scope: c.Scope, Validator: v,
		RedirectURL: strings.TrimSuffix(d.o.ConsoleURL, "/") + "/oauth/callback",
		Endpoints: func(ctx context.Context) (string, string, error) {
			m, err := v.Metadata(ctx)
			if err != nil {
				return "", "", err
			}
			if m.AuthorizationEndpoint == "" || m.TokenEndpoint == "" {
				return "", "", fmt.Errorf("issuer %s publishes no authorization or token endpoint", c.Issuer)
			}
			return m.AuthorizationEndpoint, m.TokenEndpoint, nil
		},
	}, nil
}

// consoleAddressEvery is how often a host writes its console's address
// again: the bucket's entries expire with its TTL.
const consoleAddressEvery = time.Hour

// publishConsole keeps this host's console address in the cluster record,
// where another host's console reads it to send an operator here for an
// action on a request this host holds.
func publishConsole(store *clusterrec.Store, url string, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		every := time.Duration(0)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(every):
			}
			every = consoleAddressEvery
			if err := store.PublishConsole(ctx, url); err != nil {
				log.Warn("the console's address could not be written to the cluster record; again in a minute", "err", err)
				every = time.Minute
			}
		}
	}
}

// forgetter forgets a host with a deadline: the page answers even when
// the bucket does not.
type forgetter struct{ s *clusterrec.Store }

func (f forgetter) ForgetHost(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return f.s.ForgetHost(ctx, host)
}
