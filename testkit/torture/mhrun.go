package torture

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"ticketrelay/store/clusterrec"
)

// MultiHostReplayCommand is how a multi-host run is replayed; runMultiHost
// fills Report.Replay with it.
var MultiHostReplayCommand = func(c Config) string {
	only := ""
	if c.NodeFaultsOnly {
		only = " -node-faults-only"
	}
	return fmt.Sprintf("make torture SEED=%d TORTURE_DURATION=%s TORTURE_CALLERS=%d TORTURE_FLAGS='-hosts %d%s -host-dead-after %s -lost-outbox-for %s -requests %d -kills %d -fault-rate %g'",
		c.Seed, c.Duration, c.Callers, c.Hosts, only, c.HostDeadAfter, c.LostOutboxFor, c.Requests, c.Kills, c.FaultRate)
}

// runMultiHost is Run with Config.Hosts hosts of one installation on a
// 3-node NATS cluster (see doc.go).
func runMultiHost(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Hosts < 2 || cfg.Hosts > 3 {
		return Report{}, fmt.Errorf("torture: %d hosts: a multi-host run has 2 or 3", cfg.Hosts)
	}
	cfg.HostDeadAfter = cmp.Or(cfg.HostDeadAfter, 3*time.Second)
	cfg.LostOutboxFor = cmp.Or(cfg.LostOutboxFor, cfg.Duration/10)
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	began := time.Now()
	rep := Report{Seed: cfg.Seed, Dir: cfg.Dir, Replay: MultiHostReplayCommand(cfg)}
	rng := func(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(cfg.Seed, stream)) }
	log := cfg.Log.With("seed", cfg.Seed)
	h, fk, closeRun, err := startRun(cfg)
	if err != nil {
		return rep, err
	}
	defer closeRun()
	cl, err := newMHCluster(ctx, cfg, fk.configYAML(), fk.env(), h)
	if err != nil {
		return rep, err
	}
	defer cl.killAll()
	proxy, err := startHostProxy(h)
	if err != nil {
		return rep, err
	}
	defer proxy.close()
	// The dispatchers first: one of them makes the bucket the fronts bind.
	for _, comp := range []string{CompDispatcher, CompFront} {
		for _, hst := range cl.hosts {
			if err := cl.start(ctx, hst, comp, ""); err != nil {
				return rep, err
			}
		}
	}
	names := map[string]string{} // ledger id → host name
	for _, hst := range cl.hosts {
		proxy.add(hst.name, hst.frontAddr)
		if hst.ledgerID, err = readLedgerID(ctx, hst.dbPath); err != nil {
			return rep, err
		}
		names[hst.ledgerID] = hst.name
	}
	log.Info("system up; faults start", "proxy", proxy.URL(), "hosts", cfg.Hosts, "nats", cl.nats.ClientURLs(), "duration", cfg.Duration)
	h.add(Event{Kind: KindPhase, Detail: "faults started"})

	faults, stopFaults := context.WithTimeout(ctx, cfg.Duration)
	defer stopFaults()
	fd := &feeder{f: fk, rng: rng(1), rate: cfg.FaultRate}
	var feeding sync.WaitGroup
	feeding.Go(func() { fd.run(faults) })
	sch := &mhScheduler{cl: cl, proxy: proxy, cfg: cfg, natsRNG: rng(2), hostRNG: rng(3), budget: cfg.Kills + 2}
	trackErrs := make(chan error, 2)
	go func() { trackErrs <- sch.runNATS(ctx, faults, cfg.Duration) }()
	go func() {
		if cfg.NodeFaultsOnly {
			trackErrs <- nil
			return
		}
		trackErrs <- sch.runHosts(ctx, faults, cfg.Duration)
	}()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watching sync.WaitGroup
	watching.Go(func() {
		if err := watchHeartbeats(watchCtx, cl.nats.ClientURLs(), cl.inst, names, h); err != nil {
			log.Warn("heartbeats not watched", "err", err)
		}
	})

	ld := &load{url: proxy.URL, h: h, prefix: fmt.Sprintf("trq-%x", cfg.Seed), faults: faults,
		deadline: time.Now().Add(cfg.Duration + cfg.Grace), requests: cfg.Requests, pace: 150 * time.Millisecond,
		actions: true, slackThread: fk.slackThread, fingerprints: true}
	if cfg.Requests > 0 {
		ld.pace = cfg.Duration / time.Duration(cfg.Requests)
	}
	var callers sync.WaitGroup
	for i := range cfg.Callers {
		c := &caller{id: i + 1, rng: rng(uint64(100 + i)), l: ld}
		callers.Go(func() { c.run(ctx) })
	}
	cf := &conflicter{c: &caller{id: cfg.Callers + 1, rng: rng(99), l: ld}, every: max(time.Second, cfg.Duration/time.Duration(max(4, int(cfg.Duration/(2*time.Second)))))}
	callers.Go(func() { cf.run(ctx) })

	<-faults.Done()
	h.add(Event{Kind: KindPhase, Detail: "fault phase over"})
	var trackErr error
	for range 2 {
		trackErr = errors.Join(trackErr, <-trackErrs)
	}
	if trackErr != nil {
		return rep, trackErr
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	feeding.Wait()
	if err := sch.calm(ctx); err != nil {
		return rep, err
	}
	h.add(Event{Kind: KindPhase, Detail: "faults stopped"})
	if cfg.NodeFaultsOnly {
		// The lost host was removed just now: its adoption, seen by the
		// watcher, is the checker's proof that the watcher sees marks.
		if !waitAdopted(ctx, h, sch.lost.name, 2*cfg.HostDeadAfter+30*time.Second) {
			log.Warn("the lost host's adoption was not seen", "host", sch.lost.name)
		}
	}
	log.Info("faults stopped; waiting for the callers")
	callers.Wait()
	h.add(Event{Kind: KindPhase, Detail: "callers done"})

	rr, err := openRecords(ctx, cl.nats.ClientURLs(), cl.inst, log)
	if err != nil {
		return rep, err
	}
	defer rr.close()
	live := cl.live()
	rep.Settled, err = waitMultiSettled(ctx, rr, live, sch.lostSnap, h.snapshot(), names, cfg.Settle)
	if err != nil {
		return rep, err
	}
	if !rep.Settled {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("WARN not settled within %s", cfg.Settle))
	}
	if died := cl.reap(); len(died) > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("WARN %d processes died while settling", len(died)))
	}
	// find_request on every surviving host, directly (not through the
	// proxy): each must agree with the downstream fakes.
	finals := map[string]map[string]string{}
	var hostNames []string
	for _, hst := range live {
		f, err := sweep(ctx, "http://"+hst.frontAddr+"/mcp", h.snapshot())
		if err != nil {
			return rep, fmt.Errorf("%s: %w", hst.name, err)
		}
		finals[hst.name] = f
		hostNames = append(hostNames, hst.name)
	}
	stopWatch()
	watching.Wait()
	h.add(Event{Kind: KindPhase, Detail: "settled"})
	log.Info("settled; stopping the hosts")

	var shutdown []string
	if err := cl.stopAll(); err != nil {
		shutdown = append(shutdown, err.Error())
	}
	ledgers := map[string]Snapshot{}
	for _, hst := range live {
		if ledgers[hst.name], err = ReadSnapshot(ctx, hst.dbPath); err != nil {
			return rep, err
		}
	}
	ids := map[string]bool{}
	for _, e := range h.snapshot() {
		if e.Kind == KindRequest {
			ids[e.RequestID] = true
		}
	}
	for _, s := range append(slices.Collect(maps.Values(ledgers)), sch.lostSnap) {
		for id := range s.Rows {
			ids[id] = true
		}
	}
	records, err := rr.read(ctx, slices.Sorted(maps.Keys(ids)), names)
	if err != nil {
		return rep, err
	}
	rr.close()
	if err := cl.nats.Close(); err != nil {
		shutdown = append(shutdown, err.Error())
	}
	if err := h.err(); err != nil {
		return rep, err
	}
	in := MultiInput{
		Input: Input{Events: h.snapshot(), Final: finals[hostNames[0]], Records: fk.records(), Beyond: fk.beyond(), Shutdown: shutdown, FakeFaults: fd.counts()},
		Hosts: hostNames,
		Lost:  sch.lost.name, NodeFaultsOnly: cfg.NodeFaultsOnly, HostDeadAfter: cfg.HostDeadAfter,
		Finals: finals, Ledgers: ledgers, LostLedger: sch.lostSnap, Cluster: records,
	}
	in.DB = in.merged()
	var fig MultiFigures
	if err := saveMultiInput(filepath.Join(cfg.Dir, "checked.json"), in); err != nil {
		return rep, err
	}
	rep.Result, fig = CheckMulti(in)
	rep.Multi = &fig
	rep.Elapsed = time.Since(began)
	return rep, nil
}

func saveMultiInput(path string, in MultiInput) error {
	in.Events = nil // in history.jsonl
	b, err := json.MarshalIndent(in, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// waitMultiSettled waits until every surviving ledger row is published
// and every request a ledger holds (the lost host's included) or the
// cluster record says accepted is settled in the cluster record, or the
// timeout passes.
func waitMultiSettled(ctx context.Context, rr *recordReader, live []*mhHost, lost Snapshot, events []Event, names map[string]string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	var sent []string
	for _, e := range events {
		if e.Kind == KindRequest {
			sent = append(sent, e.RequestID)
		}
	}
	settled := map[string]bool{} // settled records stay settled
	for {
		held := map[string]bool{}
		for id := range lost.Rows {
			held[id] = true
		}
		ok := true
		for _, hst := range live {
			s, err := ReadSnapshot(ctx, hst.dbPath)
			if err != nil {
				return false, err
			}
			for id, r := range s.Rows {
				held[id] = true
				ok = ok && r.Published
			}
		}
		var look []string
		for _, id := range sent {
			if !settled[id] {
				look = append(look, id)
			}
		}
		recs, err := rr.read(ctx, look, names)
		if err != nil {
			return false, err
		}
		for _, id := range look {
			r := recs[id]
			switch {
			case r != nil && r.settled():
				settled[id] = true
			case r != nil && (held[id] || r.Phase == "accepted"):
				ok = false
			}
		}
		if ok {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// conflicter sends, now and then, a request that was accepted again with
// other arguments, through the proxy (so mostly to another host than the
// one that accepted it): each must be answered idempotency_key_conflict.
type conflicter struct {
	c     *caller
	every time.Duration
}

func (cf *conflicter) run(ctx context.Context) {
	done := map[string]bool{}
	for cf.c.faulty() {
		if !cf.c.sleep(ctx, cf.c.between(cf.every/2, cf.every*3/2)) {
			return
		}
		reqs := map[string]Request{}
		var cands []string
		for _, e := range cf.c.l.h.snapshot() {
			switch {
			case e.Kind == KindRequest:
				reqs[e.RequestID] = *e.Request
			// Creates only: their other arguments are another title, and
			// the conflict names their own ticket. An occurrence's conflict
			// names the ticket it joined.
			case e.Kind == KindCall && e.Outcome == OutAccepted && e.Mode != ModeConflict && !e.Grouped && !done[e.RequestID] &&
				reqs[e.RequestID].Action == "":
				cands = append(cands, e.RequestID)
			}
		}
		if len(cands) == 0 {
			continue
		}
		id := cands[cf.c.rng.IntN(len(cands))]
		done[id] = true
		r := reqs[id]
		r.Title += conflictMark
		for attempt := 1; time.Now().Before(cf.c.l.deadline); attempt++ {
			e := cf.c.create(ctx, r, attempt, ModeConflict)
			if e.Outcome != OutAmbiguous && e.Outcome != OutUnavailable {
				break
			}
			if !cf.c.sleep(ctx, cf.c.between(50*time.Millisecond, 300*time.Millisecond)) {
				return
			}
		}
	}
}

// waitAdopted waits until the history holds a mark of host adopted, or
// timeout passes.
func waitAdopted(ctx context.Context, h *history, host string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		for _, e := range h.snapshot() {
			if e.Kind == KindHostState && e.Component == host && e.Cause == clusterrec.HostAdopted {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}
