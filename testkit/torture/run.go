package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"ticketrelay/testkit/powercut"
)

// Report is the outcome of a run.
type Report struct {
	Seed     uint64
	Dir      string
	Elapsed  time.Duration
	Settled  bool // every ledger row settled within Config.Settle
	Result   Result
	Replay   string // how to replay the run's seed
	Warnings []string
	// PowerCut is what the power-cut mode saw at its cuts (nil in the
	// other mode).
	PowerCut *PowerCutInput
	Multi    *MultiFigures // a multi-host run's figures (mhrun.go)
}

// OK reports whether every property held.
func (r Report) OK() bool { return r.Result.OK() }

// Lines renders the report: one line per property, the counts, the seed.
func (r Report) Lines() []string {
	out := r.Result.Lines(10)
	out = append(out, r.Warnings...)
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	return append(out, fmt.Sprintf("%s seed=%d elapsed=%s dir=%s replay: %s", verdict, r.Seed, r.Elapsed.Round(100*time.Millisecond), r.Dir, r.Replay))
}

// ReplayCommand is how a run is replayed; Run fills Report.Replay with it.
var ReplayCommand = func(c Config) string {
	return fmt.Sprintf("make torture SEED=%d TORTURE_DURATION=%s TORTURE_CALLERS=%d TORTURE_FLAGS='-requests %d -kills %d -stream-faults %d -fault-rate %g%s'",
		c.Seed, c.Duration, c.Callers, c.Requests, c.Kills, c.StreamFaults, c.FaultRate, modeFlags(c))
}

// modeFlags are testkit/cmd/torture's flags for c's mode.
func modeFlags(c Config) string {
	switch {
	case c.LazyNATS:
		return " -powercut -powercut-lazy-nats"
	case c.PowerCut:
		return " -powercut"
	}
	return ""
}

// startRun makes what every run starts with: its directory, the history
// file and the downstream fakes; closeRun releases them.
func startRun(cfg Config) (h *history, fk *fakes, closeRun func(), err error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	hf, err := os.Create(filepath.Join(cfg.Dir, "history.jsonl"))
	if err != nil {
		return nil, nil, nil, err
	}
	if fk, err = startFakes(); err != nil {
		hf.Close()
		return nil, nil, nil, err
	}
	return newHistory(hf, time.Now), fk, func() { fk.close(); hf.Close() }, nil
}

// Run runs the system under faults and checks the history. The error is
// for a harness that could not run (a process that never served, a
// cancelled ctx); a violated property is in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if cfg.Hosts > 0 {
		return runMultiHost(ctx, cfg)
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	began := time.Now()
	rep := Report{Seed: cfg.Seed, Dir: cfg.Dir, Replay: ReplayCommand(cfg)}
	rng := func(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(cfg.Seed, stream)) }
	log := cfg.Log.With("seed", cfg.Seed)
	h, fk, closeRun, err := startRun(cfg)
	if err != nil {
		return rep, err
	}
	defer closeRun()
	readSnap := ReadSnapshot
	var pc *powercut.FS
	if cfg.PowerCut {
		if err := probeChild(ctx); err != nil {
			return rep, err
		}
		if pc, err = mountPowerCut(ctx, cfg.Dir); err != nil {
			return rep, err
		}
		// Deferred before killAll, so it runs after it: nothing may
		// use the mount when it goes.
		defer func() {
			if err := pc.Unmount(); err != nil {
				log.Warn("unmount", "err", err)
			}
		}()
		readSnap = func(ctx context.Context, path string) (Snapshot, error) {
			out, err := readSnapshotChild(ctx, path)
			return out.Snapshot, err
		}
	}
	cl, err := newCluster(cfg, pc, fk.configYAML(), fk.env(), h)
	if err != nil {
		return rep, err
	}
	defer cl.killAll()
	for _, comp := range []string{CompNATS, CompDispatcher, CompFront} {
		if err := cl.start(ctx, comp, ""); err != nil {
			return rep, err
		}
		if comp == CompDispatcher {
			if err := cl.syncNATSStore(ctx); err != nil {
				return rep, err
			}
		}
	}
	log.Info("system up; faults start", "url", cl.frontURL(), "duration", cfg.Duration, "callers", cfg.Callers, "kills", cfg.Kills,
		"stream_faults", cfg.StreamFaults, "powercut", cfg.PowerCut, "lazy_nats", cfg.LazyNATS)

	// The fault phase.
	faults, stopFaults := context.WithTimeout(ctx, cfg.Duration)
	defer stopFaults()
	fd := &feeder{f: fk, rng: rng(1), rate: cfg.FaultRate}
	var feeding sync.WaitGroup
	feeding.Go(func() { fd.run(faults) })
	sch := &scheduler{cl: cl, rng: rng(2), kills: cfg.Kills, streamFaults: max(0, cfg.StreamFaults), budget: cfg.Kills + 2}
	var cut *cutter
	schErr := make(chan error, 1)
	if cfg.PowerCut {
		cut = newCutter(cl, pc, fk, rng(2), cfg.Kills, cfg.LazyNATS)
		go func() { schErr <- cut.run(ctx, faults, cfg.Duration) }()
	} else {
		go func() { schErr <- sch.run(ctx, faults, cfg.Duration) }()
	}
	// The callers stop early if the run cannot go on.
	callCtx, stopCalls := context.WithCancel(ctx)
	defer stopCalls()

	ld := &load{url: cl.frontURL, h: h, prefix: fmt.Sprintf("trq-%x", cfg.Seed), faults: faults,
		deadline: time.Now().Add(cfg.Duration + cfg.Grace), requests: cfg.Requests, pace: 150 * time.Millisecond,
		actions: !cfg.PowerCut, slackThread: fk.slackThread, fingerprints: !cfg.PowerCut}
	if cfg.Requests > 0 {
		ld.pace = cfg.Duration / time.Duration(cfg.Requests)
	}
	var callers sync.WaitGroup
	for i := range cfg.Callers {
		c := &caller{id: i + 1, rng: rng(uint64(100 + i)), l: ld}
		callers.Go(func() { c.run(callCtx) })
	}

	err = <-schErr
	if errors.Is(err, errRefused) {
		// A process would not start on what a cut left: the verdict.
		stopFaults()
		stopCalls()
		feeding.Wait()
		callers.Wait()
		rep.Result = Result{Properties: []Property{powerCutRefused(cut.in)}}
		rep.PowerCut = &cut.in
		rep.Elapsed = time.Since(began)
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	<-faults.Done()
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	feeding.Wait()
	if cut != nil {
		err = cut.calm(ctx)
	} else {
		err = sch.calm(ctx)
	}
	if errors.Is(err, errRefused) {
		stopCalls()
		callers.Wait()
		rep.Result = Result{Properties: []Property{powerCutRefused(cut.in)}}
		rep.PowerCut = &cut.in
		rep.Elapsed = time.Since(began)
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	h.add(Event{Kind: KindPhase, Detail: "faults stopped"})
	log.Info("faults stopped; waiting for the callers")
	callers.Wait()
	h.add(Event{Kind: KindPhase, Detail: "callers done"})

	// Quiescence: every ledger row published and settled.
	dbPath := cl.dbPath
	rep.Settled, err = waitSettled(ctx, readSnap, dbPath, cfg.Settle)
	if err != nil {
		return rep, err
	}
	if !rep.Settled {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("WARN not settled within %s", cfg.Settle))
	}
	if died := cl.reap(); len(died) > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("WARN died while settling: %v", died))
	}
	final, err := sweep(ctx, cl.frontURL(), h.snapshot())
	if err != nil {
		return rep, err
	}
	h.add(Event{Kind: KindPhase, Detail: "settled"})
	log.Info("settled; stopping the system")

	var shutdown []string
	var snap Snapshot
	if cut == nil {
		if err := cl.stopAll(); err != nil {
			shutdown = append(shutdown, err.Error())
		}
		if snap, err = ReadSnapshot(ctx, dbPath); err != nil {
			return rep, err
		}
	} else {
		// nats-server last: the stream is checked against the final ledger.
		if err := cl.stop(CompFront, CompDispatcher); err != nil {
			shutdown = append(shutdown, err.Error())
		}
		if snap, err = readSnap(ctx, dbPath); err != nil {
			return rep, err
		}
		if err := cut.finish(ctx, snap); err != nil {
			return rep, err
		}
		if err := cl.stop(CompNATS); err != nil {
			shutdown = append(shutdown, err.Error())
		}
	}
	if err := h.err(); err != nil {
		return rep, err
	}
	in := Input{Events: h.snapshot(), Final: final, Records: fk.records(), Beyond: fk.beyond(), DB: snap, Shutdown: shutdown, FakeFaults: fd.counts()}
	if cut != nil {
		in.PowerCut, rep.PowerCut = &cut.in, &cut.in
	}
	if err := saveInput(filepath.Join(cfg.Dir, "checked.json"), in); err != nil {
		return rep, err
	}
	rep.Result = Check(in)
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// saveInput writes what the checker read besides the history, for a look
// after the run.
func saveInput(path string, in Input) error {
	in.Events = nil // in history.jsonl
	b, err := json.MarshalIndent(in, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// waitSettled polls the database until every ledger row is settled or the
// timeout passes.
func waitSettled(ctx context.Context, read func(context.Context, string) (Snapshot, error), dbPath string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		snap, err := read(ctx, dbPath)
		if err != nil {
			return false, err
		}
		if snap.pending() == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sweep asks find_request about every request of the history, four at a
// time, each worker on its own session.
func sweep(ctx context.Context, url string, events []Event) (map[string]string, error) {
	ids := make(chan string)
	var (
		mu    sync.Mutex
		final = map[string]string{}
		errs  []error
		wg    sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			cs, done, err := openSession(ctx, url, -1)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				for range ids {
				}
				return
			}
			defer done()
			for id := range ids {
				st, err := findOn(ctx, cs, id)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
				} else {
					final[id] = st
				}
				mu.Unlock()
			}
		})
	}
	for _, e := range events {
		if e.Kind == KindRequest {
			ids <- e.RequestID
		}
	}
	close(ids)
	wg.Wait()
	if len(errs) > 0 {
		return final, fmt.Errorf("torture: final find_request sweep: %w", errors.Join(errs...))
	}
	return final, nil
}
