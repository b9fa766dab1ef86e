package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/config"
	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/delivery/targets"
	"ticketrelay/internal/app"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/dirsync"
	"ticketrelay/metrics"
	"ticketrelay/store"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
)

// dispatcher is a dispatcher being built and then run: what each build
// step makes, for the steps after it; Close undoes the build.
type dispatcher struct {
	o     Options
	env   app.Env
	log   *slog.Logger
	arch  archetype.Archetype // the process's logger, clock and metrics
	addrs map[string]string   // where it listens, announced once running

	cfg                 *config.File
	holder, predecessor string // relay lease holder ids: this process's, the dead one's on this data directory
	reg                 *prometheus.Registry
	db                  *sqlitedb.DB
	w                   *sqlitedb.Writer
	l                   *ledger.Ledger
	ledgerID            string
	stream              natsjs.StreamConfig
	tgts                []downstream.Target
	url                 string // the NATS server's
	nc                  *nats.Conn
	js                  jetstream.JetStream
	st                  jetstream.Stream
	pubOpts             []natsjs.PublisherOption
	services            map[string]func(context.Context) error
	fwd                 *forwarder.Forwarder
	clusterStore        *clusterrec.Store // with -multi-host
	trail               *trail.Store      // the database's audit trail

	app.Closers // what build made, undone by Close
}

// build makes every component, in the order each needs the one before:
// the data directory, metrics, the ledger, the targets, the broker, the
// services, the console.
func (d *dispatcher) build(ctx context.Context) error {
	for _, step := range []func(context.Context) error{d.prepare, d.serveMetrics, d.openLedger, d.openTargets, d.openBroker, d.buildServices, d.serveConsole} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// prepare reads the configuration and takes the data directory.
func (d *dispatcher) prepare(context.Context) error {
	if err := app.CheckMetricsListen(d.o.MetricsListen, d.o.Insecure, d.log); err != nil {
		return err
	}
	cfg, err := config.Load(d.o.Config, d.env.Lookup)
	if err != nil {
		return err
	}
	d.cfg = cfg
	if err := dirsync.MkdirAll(d.o.Data, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// One dispatcher per data directory: a second one would share the
	// JetStream store (and remove the first one's staging directory when it
	// stops). Held until the process ends; the OS drops it on a crash.
	d.holder = holderID()
	unlock, predecessor, err := lockDataDir(d.o.Data, d.holder)
	if err != nil {
		return err
	}
	d.OnClose(unlock)
	d.predecessor = predecessor
	if err := dirsync.MkdirAll(filepath.Dir(d.o.DB), 0o700); err != nil {
		return fmt.Errorf("database directory: %w", err)
	}
	return nil
}

// serveMetrics makes the metrics and serves them from here on, while the
// dispatcher waits for the database or a NATS server that cannot be
// reached yet.
func (d *dispatcher) serveMetrics(ctx context.Context) error {
	reg := app.NewRegistry()
	d.arch = archetype.Archetype{Logger: d.log, Now: time.Now, Metrics: metrics.NewDispatcher(reg)}
	stop, err := app.ServeMetrics(ctx, d.o.MetricsListen, reg, d.log, d.addrs)
	if err != nil {
		return err
	}
	d.OnClose(stop)
	d.reg = reg
	return nil
}

// openLedger opens (creating and migrating) the database the dispatcher
// owns, and names the stream's owner after it.
func (d *dispatcher) openLedger(ctx context.Context) error {
	db, err := store.Open(ctx, d.o.DB)
	if err != nil {
		return err
	}
	d.OnClose(func() { db.Close() })
	w := sqlitedb.NewWriter(db, d.log, d.arch.Metrics.Writer)
	d.OnClose(func() { w.Close() })
	d.db, d.w, d.l = db, w, ledger.New(db, w, d.arch.Now)
	if err := d.l.UseKeyNamespace(ctx, d.cfg.KeyNamespace); err != nil {
		return err
	}
	if d.ledgerID, err = d.l.ID(ctx); err != nil {
		return err
	}
	d.stream = d.o.stream()
	d.stream.Owner = d.ledgerID
	if d.o.MultiHost {
		d.stream.Owner = natsjs.OwnerCluster
	}
	return nil
}

// openTargets opens the configured targets. Each HTTP target keeps as many
// connections as it has workers (no target has workers of its own but
// local, which dials nothing).
func (d *dispatcher) openTargets(context.Context) error {
	tgts, closeTargets, err := targets.Open(d.cfg.Defs(), d.o.Data, d.arch.Now,
		targets.WithWorkers(cmp.Or(d.o.Workers, forwarder.DefaultWorkers)), targets.WithMetrics(d.arch.Metrics))
	if err != nil {
		return err
	}
	d.OnClose(func() { closeTargets() })
	d.tgts = tgts
	return nil
}

// run announces the dispatcher and runs its services until ctx ends or
// one of them fails.
func (d *dispatcher) run(ctx context.Context) error {
	// Announced before the services start: everything it names is
	// bound already, and a relay taking a dead predecessor's lease at once
	// may publish (and meet a crash test's failpoint) in the first
	// milliseconds. An announcement that fails leaves nothing running.
	app.LogConfig(d.log, d.o.Config, d.cfg)
	d.log.Info("dispatcher running", "db", d.o.DB, "nats", d.url, "installation", d.stream.Installation.String(), "stream", d.stream.Name,
		"targets", len(d.tgts), "metrics", d.addrs["metrics"], "console", d.addrs["console"])
	if err := app.Announce(d.env, d.o.AddrFile, d.addrs); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(d.services))
	for name, run := range d.services {
		wg.Go(func() {
			if err := run(runCtx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	<-runCtx.Done()
	d.log.Info("dispatcher shutting down")
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := d.nc.Drain(); err != nil {
		d.log.Warn("nats drain", "err", err)
	}
	return errors.Join(all...)
}
