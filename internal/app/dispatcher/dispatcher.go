// Package dispatcher builds the dispatcher from its flags (and runs its
// status, redrive and resolve commands): it is the one place where its
// configuration becomes components. cmd/dispatcher only calls Run.
package dispatcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"ticketrelay/internal/app"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/audit"
	"ticketrelay/clusterrec"
	"ticketrelay/config"
	"ticketrelay/forwarder"
	"ticketrelay/installation"
	"ticketrelay/internal/backoff"
	"ticketrelay/internal/maintenance"
	"ticketrelay/ledger"
	"ticketrelay/metrics"
	"ticketrelay/natsjs"
	"ticketrelay/outbox"
	"ticketrelay/targets"
)

// Run runs the dispatcher (relay and forwarder) until ctx is cancelled.
func Run(ctx context.Context, env app.Env) error {
	if len(env.Args) > 0 && adminCommands[env.Args[0]] != nil {
		return runAdmin(ctx, env.Args[0], env)
	}
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var (
		dbPath          = fs.String("db", "", "SQLite database `path` shared with mcp-front (default DATA/tickets.db)")
		dataDir         = fs.String("data", "data", "data `directory`: JetStream store, local target file")
		natsURL         = fs.String("nats", "", "`URL` of an existing NATS server with JetStream; empty runs an embedded one")
		multiHost       = fs.Bool("multi-host", false, "one of several hosts of an installation on a replicated NATS cluster (-nats, -installation): every host's forwarder delivers every host's tickets, through the cluster record")
		replicas        = fs.Int("replicas", 0, "replicas of the stream and, with -multi-host, of the request bucket (0: 3 with -multi-host, else 1)")
		hostDeadAfter   = fs.Duration("host-dead-after", 30*time.Second, "with -multi-host: how long a host may stay silent before the other hosts publish and deliver what it left")
		bucketMaxBytes  = fs.Int64("bucket-max-bytes", -1, "with -multi-host: size limit of the request bucket in `bytes` (-1: none); new requests are refused from 90% on, with an alert before")
		installName     = fs.String("installation", "", "`name` of this installation on a shared NATS server (-nats): its stream, subjects and consumers carry it; required with -nats")
		natsListen      = fs.String("nats-listen", "127.0.0.1:4222", "client `address` of the embedded nats-server (port 0: any free port)")
		natsStage       = fs.String("nats-stage-dir", "auto", "`directory` on a memory filesystem where the embedded nats-server stages atomic batches (auto: one under "+natsjs.DefaultStageRoot+" if it exists; empty: in the store, on disk)")
		metricsListen   = fs.String("metrics-listen", "127.0.0.1:9465", "Prometheus /metrics `address` (empty: off)")
		configPath      = fs.String("config", "", "configuration `file` (targets and tools)")
		logLevel        = fs.String("log-level", "info", "log `level`: debug, info, warn, error (logs go to stderr)")
		leaseTTL        = fs.Duration("lease-ttl", 15*time.Second, "relay lease `duration`: how long a crashed relay's successor may wait")
		dupWindow       = fs.Duration("dup-window", 30*time.Minute, "JetStream duplicate window (>= 30m)")
		maxAge          = fs.Duration("stream-max-age", 7*24*time.Hour, "how long JetStream keeps a message (>= -dup-window)")
		workers         = fs.Int("workers", 0, "concurrent deliveries per target (0: 64 for the local target, 16 for an API)")
		maxAttempts     = fs.Int("max-attempts", 10, "downstream calls per request before it fails (calls refused by a rate limit do not count)")
		retryBase       = fs.Duration("retry-base", time.Second, "first retry delay (doubles, with jitter)")
		retryMax        = fs.Duration("retry-max", 5*time.Minute, "longest retry delay")
		deliveryTimeout = fs.Duration("delivery-timeout", 30*time.Second, "time limit of one downstream call")
		retention       = fs.Duration("retention", 24*time.Hour, "how long a settled request is remembered (>= 30m); a request_id reused after it is a new request")
		pollInterval    = fs.Duration("poll-interval", 20*time.Millisecond, "how often an idle relay looks for new outbox rows")
		auditAfter      = fs.Duration("audit-after", 5*time.Minute, "how long after its publish (or its last attempt) a message not yet delivered is looked up in the stream, and published again if the stream lost it (longer than the broker's sync interval and -delivery-timeout)")
		addrFile        = fs.String("addr-file", "", "write the listening addresses as JSON to this `file` once serving (for scripts and tests)")
		insecure        = fs.Bool("insecure", false, "allow -metrics-listen beyond loopback (/metrics has no authentication)")
	)
	broker := app.AddNATSFlags(fs, natsURL)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: dispatcher [flags]\n\nRelays accepted tickets to JetStream and delivers them to their targets.\n\n%s\nFlags:\n", adminUsage)
		fs.PrintDefaults()
	}
	_, log, help, err := app.ParseStart(fs, env, logLevel, adminCommandNames...)
	if help || err != nil {
		return err
	}
	if err := app.CheckMetricsListen(*metricsListen, *insecure, log); err != nil {
		return err
	}
	if *dbPath == "" {
		*dbPath = filepath.Join(*dataDir, "tickets.db")
	}
	if err := broker.Check(env.Lookup); err != nil {
		return err
	}
	inst, err := installation.Parse(*installName)
	if err != nil {
		return fmt.Errorf("%w: -installation: %v", app.ErrUsage, err)
	}
	if *natsURL != "" && inst == installation.Embedded {
		// Two installations on one server with the same names take each
		// other's messages; the embedded server's names are its own.
		return fmt.Errorf("%w: -nats needs -installation NAME: a NATS server may be shared, and every installation on it needs names of its own", app.ErrUsage)
	}
	if *hostDeadAfter < time.Second {
		return fmt.Errorf("%w: -host-dead-after must be at least 1s", app.ErrUsage)
	}
	if *multiHost && *natsURL == "" {
		return fmt.Errorf("%w: -multi-host needs -nats: the hosts of an installation share a NATS cluster", app.ErrUsage)
	}
	if *replicas == 0 {
		*replicas = 1
		if *multiHost {
			*replicas = 3
		}
	}
	streamCfg := natsjs.StreamConfig{Installation: inst, Duplicates: *dupWindow, MaxAge: *maxAge, Replicas: *replicas}.WithDefaults()
	if err := streamCfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	retentionCfg := maintenance.RetentionConfig{Keep: *retention}.WithDefaults()
	if err := retentionCfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	if streamCfg.Duplicates > retentionCfg.Keep {
		return fmt.Errorf("%w: -dup-window %s is longer than -retention %s: the ledger must remember a request at least as long as JetStream does",
			app.ErrUsage, streamCfg.Duplicates, retentionCfg.Keep)
	}
	if *auditAfter <= *deliveryTimeout {
		return fmt.Errorf("%w: -audit-after %s must be longer than -delivery-timeout %s: the audit must never take a request whose attempt is still running for one the forwarder let go",
			app.ErrUsage, *auditAfter, *deliveryTimeout)
	}
	if *natsURL == "" && !app.IsLoopbackListen(*natsListen) {
		// Its traffic (every ticket) is not encrypted.
		return fmt.Errorf("%w: -nats-listen %s: the embedded nats-server has no TLS, so it listens on loopback only; "+
			"to share the stream beyond this host, run a NATS server with TLS and credentials and give its URL as -nats", app.ErrUsage, *natsListen)
	}
	cfg, err := config.Load(*configPath, env.Lookup)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// One dispatcher per data directory: a second one would share the
	// JetStream store (and remove the first one's staging directory when it
	// stops). Held until the process ends; the OS drops it on a crash.
	holder := holderID()
	unlock, predecessor, err := lockDataDir(*dataDir, holder)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(filepath.Dir(*dbPath), 0o700); err != nil {
		return fmt.Errorf("database directory: %w", err)
	}

	reg := app.NewRegistry()
	m := metrics.NewDispatcher(reg)
	// /metrics is served from here on, while the dispatcher waits for the
	// database or a NATS server that cannot be reached yet.
	addrs := map[string]string{}
	stopMetrics, err := app.ServeMetrics(ctx, *metricsListen, reg, log, addrs)
	if err != nil {
		return err
	}
	defer stopMetrics()
	db, err := ledger.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	w := ledger.NewWriter(db, log, m.Writer)
	defer w.Close()
	l := ledger.New(db, w, time.Now)
	if err := l.UseKeyNamespace(ctx, cfg.KeyNamespace); err != nil {
		return err
	}
	ledgerID, err := l.ID(ctx)
	if err != nil {
		return err
	}
	streamCfg.Owner = ledgerID
	if *multiHost {
		streamCfg.Owner = natsjs.OwnerCluster
	}

	// Each HTTP target keeps as many connections as it has workers (no
	// target has workers of its own but local, which dials nothing).
	tgts, closeTargets, err := targets.Open(cfg.Defs(), *dataDir, time.Now,
		targets.WithWorkers(cmp.Or(*workers, forwarder.DefaultWorkers)), targets.WithMetrics(m))
	if err != nil {
		return err
	}
	defer closeTargets()

	url := *natsURL
	natsOpts, err := broker.Options(env.Lookup)
	if err != nil {
		return err
	}
	storeDir, stageDir := filepath.Join(*dataDir, "nats"), ""
	if url == "" {
		if stageDir, err = resolveStageDir(*natsStage, storeDir); err != nil {
			log.Warn("atomic batches are staged on disk", "err", err)
		} else if stageDir != "" && *natsStage == "auto" {
			defer os.Remove(stageDir) // empty once every batch has committed; runs after the server's shutdown
		}
		// The embedded server admits the holder of the seed in the data
		// directory only (see natsjs.LoadOrCreateSeed).
		pub, seedOpt, seedPath, err := embeddedAuth(*dataDir)
		if err != nil {
			return err
		}
		natsOpts = append(natsOpts, seedOpt)
		ns, err := natsjs.StartEmbeddedContext(ctx, natsjs.EmbeddedConfig{Listen: *natsListen, StoreDir: storeDir, Users: []string{pub}}, log)
		if err != nil {
			return err
		}
		defer ns.WaitForShutdown()
		defer ns.Shutdown()
		url = ns.ClientURL()
		addrs["nats"] = url
		if err := writeBrokerInfo(*dataDir, brokerInfo{URL: url, Nkey: seedPath, Stream: streamCfg.Name}); err != nil {
			log.Warn("`dispatcher status` will not say how to reach the embedded nats-server", "err", err)
		}
	}
	nc, err := app.ConnectNATS(ctx, url, "ticketrelay-dispatcher", natsOpts, log)
	if ctx.Err() != nil {
		return nil // stopped while waiting for the server: a clean stop
	}
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	st, err := ensureStream(ctx, js, streamCfg, log)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	if *natsURL == "" {
		// The embedded server never fsyncs the directories it made the
		// stream in: until this, a power cut could take them, and every
		// acknowledged message with them.
		if err := natsjs.SyncStoreDirs(storeDir); err != nil {
			return err
		}
	}
	var pubOpts []natsjs.PublisherOption
	if stageDir != "" {
		if err := natsjs.StageBatchesIn(storeDir, streamCfg.Name, stageDir); err != nil {
			log.Warn("atomic batches are staged on disk", "err", err)
		} else {
			log.Info("atomic batches are staged in memory", "dir", stageDir)
			pubOpts = append(pubOpts, natsjs.MinAtomicBatch(natsjs.MemoryMinAtomicBatch))
		}
	}
	if natsjs.AllowsAtomicBatches(st) {
		pubOpts = append(pubOpts, natsjs.AtomicBatches(func(err error) {
			m.BatchFallbacks.Inc()
			log.Debug("atomic batch sent again message by message", "err", err)
		}))
	} else {
		log.Warn("the NATS server does not take atomic batches (nats-server 2.12+ does): the relay publishes message by message")
	}

	var watcher *audit.Watcher // made below, before anything runs
	relay, err := outbox.NewRelay(outbox.RelayConfig{
		Holder:       holder,
		Predecessor:  predecessor, // crashed on this data directory: its lease is not waited out
		LeaseTTL:     *leaseTTL,
		PollInterval: *pollInterval,
	}, db.Reader(), w, audit.PokeOnError(natsjs.NewPublisher(js, append(pubOpts, natsjs.ForInstallation(inst))...), func() { watcher.Poke() }),
		log.With("component", "relay"), m, time.Now)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	var deliveries forwarder.Deliveries = l
	var auditStore audit.Store = l
	var hosts *clusterrec.Hosts
	var watch *clusterWatch
	if *multiHost {
		store, err := openBucket(ctx, js, clusterrec.Config{Installation: inst, Host: ledgerID, Replicas: *replicas,
			TTL: streamCfg.MaxAge, MaxBytes: *bucketMaxBytes}, log.With("component", "cluster"))
		if err != nil {
			return err
		}
		deliveries = clusterrec.NewDeliveries(store, l, time.Now)
		auditStore = clusterrec.NewAuditStore(store, l, *auditAfter, time.Now)
		pending := func(ctx context.Context) (time.Time, bool, error) {
			n, oldest, err := outbox.Backlog(ctx, db.Reader())
			return oldest, n > 0, err
		}
		hosts = clusterrec.NewHosts(clusterrec.HostsConfig{Every: *hostDeadAfter / 6, DeadAfter: *hostDeadAfter}, store, l, pending,
			log.With("component", "hosts"), time.Now)
		watch = &clusterWatch{js: js, store: store, inst: inst, deadAfter: *hostDeadAfter, every: clusterWatchEvery(*hostDeadAfter),
			m: metrics.NewCluster(reg), log: log.With("component", "cluster"), now: time.Now}
		log.Info("multi-host: deliveries recorded in the cluster record", "bucket", inst.Bucket(), "host", ledgerID, "replicas", *replicas)
	}
	fwd := forwarder.New(forwarder.Config{
		Installation:    inst,
		Stream:          streamCfg.Name,
		KeyNamespace:    cfg.KeyNamespace,
		Workers:         *workers,
		DeliveryTimeout: *deliveryTimeout,
		MaxAttempts:     *maxAttempts,
		Retry:           backoff.Policy{Base: *retryBase, Max: *retryMax},
		RateLimits:      targets.RateLimits(cfg.Defs()),
		ConsumerCheck:   time.Second, // a deleted or changed consumer is put back within seconds
		Retention:       retentionCfg.Keep,
	}, js, deliveries, tgts, log.With("component", "forwarder"), m, time.Now)

	pruner, err := maintenance.NewPruner(retentionCfg, l, log.With("component", "retention"), m, time.Now)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}
	auditor, err := audit.New(audit.Config{After: *auditAfter}, auditStore, natsjs.NewStreamChecker(js, streamCfg.Name),
		relay.Leading, log.With("component", "audit"), m, time.Now)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}

	// Say which targets this dispatcher serves before saying it runs:
	// find_request and the audit tell a request no one will deliver.
	names := make([]string, len(tgts))
	for i, t := range tgts {
		names[i] = t.Name()
	}
	m.Init(names) // before the forwarders run: their first event counts from 0
	presence := l.NewPresence(holder, names, cfg.KeyNamespace)
	if err := presence.Announce(ctx); err != nil {
		return err
	}
	// The stream watcher puts back a stream deleted or changed under this
	// dispatcher and has what it lost published again (audit/watch.go).
	watcher, err = audit.NewWatcher(audit.WatchConfig{MaxAge: streamCfg.MaxAge}, l, natsjs.NewStreamWatch(js, streamCfg, st), presence,
		relay.Leading, log.With("component", "stream-watch"), m, time.Now)
	if err != nil {
		return fmt.Errorf("%w: %v", app.ErrUsage, err)
	}

	// Announced before the services start: everything it names is
	// bound already, and a relay taking a dead predecessor's lease at once
	// may publish (and meet a crash test's failpoint) in the first
	// milliseconds. An announcement that fails leaves nothing running.
	log.Info("dispatcher running", "db", *dbPath, "nats", url, "installation", inst.String(), "stream", streamCfg.Name,
		"targets", len(tgts), "metrics", addrs["metrics"])
	if err := app.Announce(env, *addrFile, addrs); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	services := map[string]func(context.Context) error{"relay": relay.Run, "forwarder": fwd.Run, "retention": pruner.Run,
		"audit": auditor.Run, "presence": maintenance.NewPresence(presence, log.With("component", "presence")).Run, "stream-watch": watcher.Run}
	if hosts != nil {
		services["hosts"] = hosts.Run
	}
	if watch != nil {
		services["cluster-watch"] = watch.Run
	}
	errs := make(chan error, len(services))
	for name, run := range services {
		wg.Go(func() {
			if err := run(runCtx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	<-runCtx.Done()
	log.Info("dispatcher shutting down")
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "err", err)
	}
	return errors.Join(all...)
}

// ensureStream waits for JetStream (an external server may be starting or
// unreachable for a while: the dispatcher backs off and keeps trying until it
// is stopped) and creates or updates the stream. A configuration error is
// final.
func ensureStream(ctx context.Context, js jetstream.JetStream, c natsjs.StreamConfig, log interface{ Warn(string, ...any) }) (jetstream.Stream, error) {
	pace := backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := natsjs.EnsureStream(cctx, js, c)
		cancel()
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || errors.Is(err, natsjs.ErrInvalidStream) || errors.Is(err, natsjs.ErrForeignStream) {
			return nil, err
		}
		log.Warn("jetstream not ready; retrying", "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pace.Delay(attempt)):
		}
	}
}

// openBucket creates or updates the installation's request bucket,
// waiting for the cluster as ensureStream does.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg clusterrec.Config, log *slog.Logger) (*clusterrec.Store, error) {
	pace := backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := clusterrec.Open(cctx, js, cfg, log, time.Now)
		cancel()
		if err == nil || ctx.Err() != nil || errors.Is(err, clusterrec.ErrForeignBucket) {
			return s, err
		}
		log.Warn("request bucket not ready; retrying", "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pace.Delay(attempt)):
		}
	}
}

// resolveStageDir turns -nats-stage-dir into a directory: "auto" is
// natsjs.MemoryStageDir under natsjs.DefaultStageRoot ("" where there is
// none), "" is none, anything else is created if missing.
func resolveStageDir(flag, storeDir string) (string, error) {
	switch flag {
	case "":
		return "", nil
	case "auto":
		return natsjs.MemoryStageDir(natsjs.DefaultStageRoot, storeDir)
	}
	if err := os.MkdirAll(flag, 0o700); err != nil {
		return "", fmt.Errorf("-nats-stage-dir: %w", err)
	}
	return flag, nil
}

func holderID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}
