package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"ticketrelay/clusterrec"
	"ticketrelay/console"
	"ticketrelay/internal/app"
	"ticketrelay/internal/operate"
	"ticketrelay/mcpauth"
)

// serveConsole serves the operator console on -console-listen (none if
// empty), over this host's ledger and forwarders, and with -multi-host
// the installation's cluster view.
func (d *dispatcher) serveConsole(ctx context.Context) error {
	if d.o.ConsoleListen == "" {
		return nil
	}
	cfg := console.Config{Store: d.l, Live: d.fwd.Live, Log: d.log.With("component", "console"), Now: d.arch.Now,
		Loopback: app.IsLoopbackListen(d.o.ConsoleListen), Trail: consoleTrail{trailRecorder{d.trail}}}
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
	} else if !app.IsLoopbackListen(d.o.ConsoleListen) {
		d.log.Warn("serving the operator console beyond loopback WITHOUT sign-in (-insecure)", "console_listen", d.o.ConsoleListen)
	}
	if store := d.clusterStore; store != nil {
		inst, dead := d.stream.Installation, d.o.HostDeadAfter
		cfg.Cluster = func(ctx context.Context) *operate.ClusterView {
			v := operate.LookAtCluster(ctx, d.js, store, inst, dead, d.arch.Now())
			return &v
		}
		cfg.Hosts = forgetter{store}
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
	return nil
}

// forgetter forgets a host with a deadline: the page answers even when
// the bucket does not.
type forgetter struct{ s *clusterrec.Store }

func (f forgetter) ForgetHost(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return f.s.ForgetHost(ctx, host)
}
