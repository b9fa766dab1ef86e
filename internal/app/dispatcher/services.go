package dispatcher

import (
	"context"
	"fmt"
	"os"
	"time"

	"ticketrelay/delivery/audit"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/delivery/targets"
	"ticketrelay/internal/app"
	"ticketrelay/internal/backoff"
	"ticketrelay/internal/maintenance"
	"ticketrelay/metrics"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
)

// buildServices makes the services Run runs: the relay, the forwarder,
// retention, the audit, presence, the stream watcher, and with -multi-host
// the hosts' heartbeat and the cluster's watch. A configuration a service
// refuses is a usage error.
func (d *dispatcher) buildServices(ctx context.Context) error {
	// A failed publish pokes the stream watcher, which is made with the
	// relay: its pokes are made first.
	pokes := audit.NewPokes()
	pub := natsjs.NewPublisher(d.js, d.pubOpts...)
	relay, err := outbox.NewRelay(d.arch.Component("relay"), outbox.RelayConfig{
		Holder:       d.holder,
		Subject:      pub.PublishedSubject,
		Predecessor:  d.predecessor, // crashed on this data directory: its lease is not waited out
		LeaseTTL:     d.o.LeaseTTL,
		PollInterval: d.o.PollInterval,
		WakeupPath:   outbox.WakeupPath(d.db.Path),
	}, d.db.Reader(), d.w, audit.PokeOnError(pub, pokes))
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	d.services = map[string]func(context.Context) error{"relay": relay.Run}
	var deliveries forwarder.Deliveries = d.l
	var auditStore audit.Store = d.l
	if d.o.MultiHost {
		if deliveries, auditStore, err = d.joinCluster(ctx); err != nil {
			return err
		}
	}
	host, _ := os.Hostname()
	d.fwd = forwarder.New(d.arch.Component("forwarder"), forwarder.Config{
		Installation:    d.stream.Installation,
		Stream:          d.stream.Name,
		KeyNamespace:    d.cfg.KeyNamespace,
		Workers:         d.o.Workers,
		DeliveryTimeout: d.o.DeliveryTimeout,
		MaxAttempts:     d.o.MaxAttempts,
		Retry:           backoff.Policy{Base: d.o.RetryBase, Max: d.o.RetryMax},
		RateLimits:      targets.RateLimits(d.cfg.Defs()),
		Callers:         targets.CallerModes(d.cfg.Defs()),
		ConsumerCheck:   time.Second, // a deleted or changed consumer is put back within seconds
		Retention:       d.o.retention().Keep,
		Backlog:         app.DrainingGC,
		Host:            host,
	}, d.js, deliveries, d.tgts)
	d.services["forwarder"] = d.fwd.Run
	pruner, err := maintenance.NewPruner(d.arch.Component("retention"), d.o.retention(), d.l)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	d.services["retention"] = pruner.Run
	auditor, err := audit.New(d.arch.Component("audit"), audit.Config{After: d.o.AuditAfter}, auditStore,
		natsjs.NewStreamChecker(d.js, d.stream.Name), relay.Leading)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	d.services["audit"] = auditor.Run
	presence, err := d.announcePresence(ctx)
	if err != nil {
		return err
	}
	// The stream watcher puts back a stream deleted or changed under this
	// dispatcher and has what it lost published again (delivery/audit/watch.go).
	watcher, err := audit.NewWatcher(d.arch.Component("stream-watch"), audit.WatchConfig{MaxAge: d.stream.MaxAge}, d.l,
		natsjs.NewStreamWatch(d.js, d.stream, d.st), presence, relay, pokes)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	d.services["stream-watch"] = watcher.Run
	return d.buildTrail(ctx)
}

// announcePresence says which targets this dispatcher serves before it
// says it runs: find_request and the audit tell a request no one will
// deliver.
func (d *dispatcher) announcePresence(ctx context.Context) (*ledger.Presence, error) {
	names := make([]string, len(d.tgts))
	for i, t := range d.tgts {
		names[i] = t.Name()
	}
	d.arch.Metrics.Init(names) // before the forwarders run: their first event counts from 0
	presence := d.l.NewPresence(d.holder, names, d.cfg.KeyNamespace)
	if err := presence.Announce(ctx); err != nil {
		return nil, err
	}
	d.services["presence"] = maintenance.NewPresence(d.arch.Component("presence"), presence).Run
	return presence, nil
}

// joinCluster opens the installation's request bucket: deliveries and the
// audit then go through the cluster record, and the hosts' heartbeat and
// the cluster's watch run beside the other services.
func (d *dispatcher) joinCluster(ctx context.Context) (forwarder.Deliveries, audit.Store, error) {
	inst := d.stream.Installation
	store, err := openBucket(ctx, d.arch.Component("cluster"), d.js, clusterrec.Config{Installation: inst, Host: d.ledgerID,
		Replicas: d.o.Replicas, TTL: d.stream.MaxAge, MaxBytes: d.o.BucketMaxBytes})
	if err != nil {
		return nil, nil, err
	}
	d.clusterStore = store
	pending := func(ctx context.Context) (time.Time, bool, error) {
		n, oldest, err := outbox.Backlog(ctx, d.db.Reader())
		return oldest, n > 0, err
	}
	dead := d.o.HostDeadAfter
	d.services["hosts"] = clusterrec.NewHosts(d.arch.Component("hosts"), clusterrec.HostsConfig{Every: dead / 6, DeadAfter: dead},
		store, d.l, pending).Run
	watch := &clusterWatch{js: d.js, store: store, inst: inst, deadAfter: dead, every: clusterWatchEvery(dead),
		m: metrics.NewCluster(d.reg), log: d.log.With("component", "cluster"), now: d.arch.Now}
	d.services["cluster-watch"] = watch.Run
	d.log.Info("multi-host: deliveries recorded in the cluster record", "bucket", inst.Bucket(), "host", d.ledgerID, "replicas", d.o.Replicas)
	return clusterrec.NewDeliveries(store, d.l, d.arch.Now), clusterrec.NewAuditStore(store, d.l, d.o.AuditAfter, d.arch.Now), nil
}
