package bench

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ticketrelay/downstream/webhook"
	"ticketrelay/forwarder"
	"ticketrelay/internal/e2eproc"
	"ticketrelay/ticket"
)

// Scenario 8 (issue 22): a backlog of accepted tickets delivered to a
// webhook receiver in its own process (bench/receiver), timed from the
// start of the process that delivers until the receiver holds every key.
// Three senders, alternated round by round, each with a fresh receiver:
//
//   - ticketrelay: the backlog prefilled in the ledger (unpublished outbox
//     rows, as mcp-front leaves them), a dispatcher started on it with its
//     defaults and a webhook target: it relays the backlog to JetStream
//     and delivers it;
//   - River on SQLite (bench/riverbaseline): the backlog inserted as jobs,
//     then a River client started whose workers POST each job;
//   - the ceiling: plain POSTs from ceilingSenders goroutines of the load
//     generator, nothing stored.
//
// Then the dispatcher alone against a receiver that answers in SlowLatency,
// held to a share of what its workers can do at that latency.

// ceilingSenders is the concurrency of the plain-POST ceiling.
const ceilingSenders = 100

// backlogTarget is the webhook target's name in the dispatcher's
// configuration (and the tickets' target in the prefilled ledger).
const backlogTarget = "hook"

// receiverStats is what bench/receiver serves on its stats listener.
type receiverStats struct {
	Requests   int64 `json:"requests"`
	Keys       int64 `json:"keys"`
	Duplicates int64 `json:"duplicates"`
	NoKey      int64 `json:"no_key"`
	NewConns   int64 `json:"new_conns"`
	OpenConns  int64 `json:"open_conns"`
	MaxOpen    int64 `json:"max_open"`
	FirstAt    int64 `json:"first_at"`
	ExpectedAt int64 `json:"expected_at"`
}

// drain is one timed delivery of a backlog.
type drain struct {
	tickets int
	setup   time.Duration // prefill or insert, not timed
	took    time.Duration // sender start → the receiver holds every key
	cpu     time.Duration // the sender's process, start → done (0: the ceiling, in-process)
	recvCPU time.Duration
	rss     int64 // the sender's peak RSS (0: the ceiling)
	recv    receiverStats
	note    string // what the sender's own metrics say
}

func (d drain) rate() float64 { return float64(d.tickets) / d.took.Seconds() }

func (d drain) cpuPer() time.Duration { return d.cpu / time.Duration(d.tickets) }

func (d drain) String() string {
	s := fmt.Sprintf("%s tickets in %s = %s (setup %s, untimed); receiver: %d POSTs, %d keys, %d duplicates, %d new connections (at most %d open); receiver CPU %d µs/ticket",
		count3(d.tickets), d.took.Round(time.Millisecond), perSec(d.rate()), d.setup.Round(time.Millisecond),
		d.recv.Requests, d.recv.Keys, d.recv.Duplicates, d.recv.NewConns, d.recv.MaxOpen, (d.recvCPU / time.Duration(d.tickets)).Microseconds())
	if d.cpu > 0 {
		s += fmt.Sprintf("; sender CPU %d µs/ticket, peak RSS %s", d.cpuPer().Microseconds(), mib(d.rss))
	}
	return s + d.note
}

func (r *runner) scenario8(ctx context.Context) error {
	n, rounds := r.cfg.BacklogRows, r.cfg.BacklogRounds
	var relay, riv, ceil []drain
	doRelay := func() error {
		profile := ""
		if len(relay) == 0 && r.cfg.PprofDir != "" {
			profile = "dispatcher-backlog"
		}
		d, err := r.backlogRelay(ctx, fmt.Sprintf("s8-relay-%d", len(relay)+1), n, 0, profile)
		relay = append(relay, d)
		return err
	}
	doRiver := func() error {
		d, err := r.backlogRiver(ctx, fmt.Sprintf("s8-river-%d", len(riv)+1), n)
		riv = append(riv, d)
		return err
	}
	doCeiling := func() error {
		d, err := r.backlogCeiling(ctx, fmt.Sprintf("s8-ceiling-%d", len(ceil)+1), n)
		ceil = append(ceil, d)
		return err
	}
	if r.cfg.BacklogAlone {
		return r.backlogAlone(ctx, rounds, doRelay, func() []drain { return relay })
	}
	for _, run := range backlogOrder(rounds, doRelay, doRiver, doCeiling) {
		if err := run(); err != nil {
			return err
		}
	}
	workers := r.dispatcherWorkers()
	rate := func(ds []drain) float64 { return median(ds, drain.rate) }
	if len(relay) == 0 || len(riv) == 0 || len(ceil) == 0 {
		return errors.New("bench: scenario 8 ran no round")
	}
	rt, rr, rc := rate(relay), rate(riv), rate(ceil)
	cpu := time.Duration(median(relay, func(d drain) float64 { return float64(d.cpuPer()) }))
	rivCPU := time.Duration(median(riv, func(d drain) float64 { return float64(d.cpuPer()) }))
	var dups, rivDups, ceilDups int64
	var conns, open, rivConns int64
	for _, d := range relay {
		dups += d.recv.Duplicates
		conns = max(conns, d.recv.NewConns)
		open = max(open, d.recv.MaxOpen)
	}
	for _, d := range riv {
		rivDups += d.recv.Duplicates
		rivConns = max(rivConns, d.recv.NewConns)
	}
	for _, d := range ceil {
		ceilDups += d.recv.Duplicates
	}
	settings := fmt.Sprintf("%s-ticket backlog, fresh receiver (bench/receiver, 200 at once) per run, timed from the sender's start until the receiver holds every key; "+
		"medians of %d ticketrelay and %d River runs, in the order %s; dispatcher defaults (at most %d calls in flight, from %d), backlog prefilled in the ledger unpublished; "+
		"River %s on SQLite: jobs inserted first, %d workers", count3(n), len(relay), len(riv), backlogOrderText(rounds), workers, forwarder.StartConcurrency, r.riverVersion(), r.cfg.RiverWorkers)
	r.rep.add(row{"8", fmt.Sprintf("deliver a %s-ticket backlog to a webhook, vs River", count3(n)), settings,
		perSec(rt), perSec(rr) + " River on SQLite", times(ratio(rt, rr)), "≥ 3×", verdict(ratio(rt, rr) >= 3)})
	r.rep.add(row{"8", "the same vs plain concurrent POSTs (the ceiling)", fmt.Sprintf("same rounds; ceiling: %d goroutines of the load generator POSTing the same payloads, nothing stored", ceilingSenders),
		perSec(rt), perSec(rc) + " plain POSTs", times(ratio(rt, rc)), "≥ 0.4×", verdict(ratio(rt, rc) >= 0.4)})
	r.rep.add(row{"8", "dispatcher CPU per delivered ticket", "same runs; /proc utime+stime of the dispatcher from its start to the last key (start-up and relay included)",
		fmt.Sprintf("%d µs", cpu.Microseconds()), fmt.Sprintf("%d µs River's process", rivCPU.Microseconds()), times(ratio(float64(cpu), float64(rivCPU))),
		"≤ 250 µs", verdict(cpu <= 250*time.Microsecond)})
	r.rep.add(row{"8", "duplicates at the receiver", "same runs; POSTs repeating a key the receiver already held, all rounds, until the sender was stopped",
		strconv.FormatInt(dups, 10), fmt.Sprintf("%d River, %d ceiling", rivDups, ceilDups), "—", "0", verdict(dups == 0)})
	r.rep.add(row{"8", "new connections at the receiver", fmt.Sprintf("same runs; TCP connections accepted (http.Server.ConnState), the most in one run; at most %d open at once", open),
		strconv.FormatInt(conns, 10), fmt.Sprintf("%d workers (River: %d for %d workers)", workers, rivConns, r.cfg.RiverWorkers), "—", "≤ workers", verdict(conns > 0 && conns <= int64(workers))})
	for i, d := range relay {
		r.rep.detail("8 ticketrelay round %d: %s", i+1, d)
	}
	for i, d := range riv {
		r.rep.detail("8 River round %d: %s", i+1, d)
	}
	for i, d := range ceil {
		r.rep.detail("8 ceiling round %d: %s", i+1, d)
	}

	// The same against a receiver with an API's latency: the workers are
	// what bounds it.
	lat, sn := r.cfg.SlowLatency, r.cfg.SlowRows
	d, err := r.backlogRelay(ctx, "s8-slow", sn, lat, "")
	if err != nil {
		return err
	}
	bound := float64(workers) / lat.Seconds()
	r.rep.add(row{"8", fmt.Sprintf("the same to a receiver answering in %s", lat),
		fmt.Sprintf("%s-ticket backlog, one run, dispatcher defaults (at most %d calls in flight, from %d); bound = workers ÷ latency", count3(sn), workers, forwarder.StartConcurrency),
		perSec(d.rate()), perSec(bound) + " bound", times(ratio(d.rate(), bound)), "≥ 0.8×", verdict(ratio(d.rate(), bound) >= 0.8 && d.recv.Duplicates == 0)})
	r.rep.detail("8 ticketrelay, receiver answering in %s: %s", lat, d)
	return nil
}

// backlogAlone runs only the dispatcher's rounds and reports their
// figures, without the baselines that make them ratios.
func (r *runner) backlogAlone(ctx context.Context, rounds int, run func() error, relay func() []drain) error {
	for range rounds {
		if err := run(); err != nil {
			return err
		}
	}
	ds := relay()
	cpu := time.Duration(median(ds, func(d drain) float64 { return float64(d.cpuPer()) }))
	r.rep.add(row{"8", "backlog alone: dispatcher throughput and CPU per ticket", fmt.Sprintf("medians of %d runs; no baselines (-backlog-alone)", len(ds)),
		fmt.Sprintf("%s, %d µs", perSec(median(ds, drain.rate)), cpu.Microseconds()), "—", "—", "—", "info"})
	for i, d := range ds {
		r.rep.detail("8 ticketrelay round %d: %s", i+1, d)
	}
	return nil
}

// backlogOrder is the order of scenario 8's runs: ticketrelay and the
// ceiling alternate round by round, and a River run (a minute of the run's
// budget on a 2-core machine) sits between each pair of rounds, so that
// both ticketrelay's runs bracket it: relay, ceiling, River, ceiling, relay.
// An odd last round is relay, River, ceiling.
func backlogOrder[F any](rounds int, relay, river, ceiling F) []F {
	var out []F
	for k := 1; k <= rounds; k += 2 {
		if k == rounds {
			out = append(out, relay, river, ceiling)
		} else {
			out = append(out, relay, ceiling, river, ceiling, relay)
		}
	}
	return out
}

func backlogOrderText(rounds int) string {
	return strings.Join(backlogOrder(rounds, "ticketrelay", "River", "ceiling"), ", ")
}

// median of f over ds (the mean of the middle two for an even count).
func median(ds []drain, f func(drain) float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	v := make([]float64, len(ds))
	for i, d := range ds {
		v[i] = f(d)
	}
	slices.Sort(v)
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2
	}
	return v[m]
}

// dispatcherWorkers is the dispatcher's workers per API target: its
// -workers among the extra flags, else its default.
func (r *runner) dispatcherWorkers() int {
	a := r.cfg.DispatcherArgs
	for i, s := range a {
		name, val, eq := strings.Cut(strings.TrimLeft(s, "-"), "=")
		if name != "workers" || !strings.HasPrefix(s, "-") {
			continue
		}
		if !eq && i+1 < len(a) {
			val = a[i+1]
		}
		if n, err := strconv.Atoi(val); err == nil && n > 0 {
			return n
		}
	}
	return forwarder.DefaultWorkers
}

// startReceiver starts a fresh bench/receiver in dir.
func (r *runner) startReceiver(ctx context.Context, dir string, expect int, latency time.Duration) (*proc, error) {
	return startProc(ctx, "receiver", r.bin("receiver"), dir,
		[]string{"-expect", strconv.Itoa(expect), "-latency", latency.String()}, nil, "hook", "stats")
}

func receiverStatsOf(ctx context.Context, p *proc) (receiverStats, error) {
	var s receiverStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr("stats")+"/", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("bench: receiver stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("bench: receiver stats: %w", err)
	}
	return s, nil
}

// awaitKeys waits until the receiver holds every key (its -expect) and
// returns the time the last one arrived. sender, if set, is watched: a
// sender that exits before is an error.
func awaitKeys(ctx context.Context, recv, sender *proc, n int) (time.Time, error) {
	var at time.Time
	// A slow sender (River under load) may take minutes; no sender of a
	// backlog this size needs more than a few.
	timeout := 2*time.Minute + time.Duration(n)*5*time.Millisecond
	err := waitFor(ctx, timeout, fmt.Sprintf("the receiver holding %d keys", n), func() (bool, error) {
		if sender != nil && sender.Exited() {
			return false, fmt.Errorf("bench: %s exited while delivering: %v:\n%s", sender.Name(), sender.Err(), sender.logTail())
		}
		s, err := receiverStatsOf(ctx, recv)
		if err != nil {
			return false, err
		}
		if s.NoKey > 0 {
			return false, fmt.Errorf("bench: the receiver got %d POSTs without Idempotency-Key", s.NoKey)
		}
		if s.ExpectedAt != 0 {
			at = time.Unix(0, s.ExpectedAt)
			return true, nil
		}
		return false, nil
	})
	return at, err
}

// finish stops the sender (if it is a process) and then the receiver, and
// completes d with the receiver's final counters: a duplicate sent after
// the last key still counts.
func finish(ctx context.Context, d *drain, recv, sender *proc) error {
	if sender != nil {
		var err error
		if d.cpu, err = cpuTime(sender.Pid()); err != nil {
			return err
		}
		if d.rss, err = sender.peakRSS(); err != nil {
			return err
		}
		if err := sender.stop(); err != nil {
			return err
		}
	}
	var err error
	if d.recv, err = receiverStatsOf(ctx, recv); err != nil {
		return err
	}
	if d.recvCPU, err = cpuTime(recv.Pid()); err != nil {
		return err
	}
	return recv.stop()
}

// backlogRelay prefills n unpublished tickets for a webhook target, starts
// a receiver answering after latency and a dispatcher with its defaults,
// and times the delivery.
// With profile set, the dispatcher runs under bench/profwrap and a CPU
// profile of its start is saved as PprofDir/<profile>.pprof.
func (r *runner) backlogRelay(ctx context.Context, name string, n int, latency time.Duration, profile string) (drain, error) {
	d := drain{tickets: n}
	dir, err := r.mkdir(name)
	if err != nil {
		return d, err
	}
	if d.setup, err = (prefill{path: filepath.Join(dir, "tickets.db"), rows: n, target: backlogTarget}).run(ctx); err != nil {
		return d, err
	}
	recv, err := r.startReceiver(ctx, dir, n, latency)
	if err != nil {
		return d, err
	}
	defer recv.stop()
	conf := fmt.Sprintf("targets:\n  - name: %s\n    kind: webhook\n    endpoint: http://%s/hook\n", backlogTarget, recv.Addr("hook"))
	confPath := filepath.Join(dir, "ticketrelay.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return d, err
	}
	bin, env := r.bin("dispatcher"), r.cfg.DispatcherEnv
	var pprofAddr string
	if profile != "" {
		// bench/profwrap runs the dispatcher's own code with a pprof listener.
		if pprofAddr, err = e2eproc.FreeAddr(); err != nil {
			return d, err
		}
		bin = r.bin("profwrap")
		env = append(append([]string(nil), env...), "BENCH_PROFWRAP_APP=dispatcher", "BENCH_PPROF_ADDR="+pprofAddr)
	}
	start := time.Now()
	disp, err := startProc(ctx, "dispatcher", bin, dir,
		append([]string{"-data", dir, "-db", filepath.Join(dir, "tickets.db"), "-config", confPath,
			"-nats-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0"}, r.cfg.DispatcherArgs...),
		env, "metrics")
	if err != nil {
		return d, err
	}
	defer disp.stop()
	var profiled sync.WaitGroup
	done := make(chan struct{})
	if profile != "" {
		// Back-to-back windows until the receiver holds every key: the
		// drain's length is not known beforehand, and a CPU profile cannot
		// be ended early. go tool pprof merges the files it is given.
		profiled.Go(func() {
			for i := 1; ; i++ {
				r.profile(pprofAddr, fmt.Sprintf("%s-%02d", profile, i))(ctx, profileWindow)
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	end, err := awaitKeys(ctx, recv, disp, n)
	close(done)
	if err != nil {
		profiled.Wait()
		return d, err
	}
	if profile != "" {
		// What the drain allocated (the heap profile's cumulative side):
		// garbage is the collector's CPU.
		r.saveProfile(ctx, pprofAddr, "/debug/pprof/allocs", "allocs-"+profile)
	}
	d.took = end.Sub(start)
	// What the dispatcher saw: its connections and calls, its SQLite
	// commits.
	if m, err := scrape(disp.Addr("metrics")); err == nil {
		d.note = fmt.Sprintf("; dispatcher: %.0f connections dialed, %.0f delivery attempts (%.0f with the record read ahead), "+
			"concurrency limit %.0f at the end, mean call %s, mean SQLite transaction %s at %.1f ops/commit",
			m.Get(connsOpened, "target", backlogTarget), m.Get(deliveryAttempts, "target", backlogTarget), m.Get(readAhead, "target", backlogTarget),
			m.Get(concurrencyLimit, "target", backlogTarget), meanOf(m, deliverSeconds), meanOf(m, commitSeconds), opsPerCommit(m))
	}
	cpu, err := cpuTime(disp.Pid())
	// The last window ends by itself; the dispatcher is idle meanwhile.
	profiled.Wait()
	if err != nil {
		return d, err
	}
	err = finish(ctx, &d, recv, disp)
	d.cpu = cpu
	return d, err
}

// profileWindow is the length of each CPU profile of scenario 8's first
// dispatcher.
const profileWindow = 5 * time.Second

// backlogRiver inserts n jobs with bench/riverbaseline, then starts its
// River client against a fresh receiver and times the delivery.
func (r *runner) backlogRiver(ctx context.Context, name string, n int) (drain, error) {
	d := drain{tickets: n}
	dir, err := r.mkdir(name)
	if err != nil {
		return d, err
	}
	db := filepath.Join(dir, "river.db")
	t0 := time.Now()
	ins := exec.CommandContext(ctx, r.bin("riverbaseline"), "insert", "-db", db, "-n", strconv.Itoa(n))
	ins.SysProcAttr = childAttr()
	if out, err := ins.CombinedOutput(); err != nil {
		return d, fmt.Errorf("bench: riverbaseline insert: %w: %s", err, out)
	}
	d.setup = time.Since(t0)
	recv, err := r.startReceiver(ctx, dir, n, 0)
	if err != nil {
		return d, err
	}
	defer recv.stop()
	start := time.Now()
	riv, err := startProc(ctx, "riverbaseline", r.bin("riverbaseline"), dir,
		[]string{"work", "-db", db, "-url", "http://" + recv.Addr("hook") + "/hook", "-workers", strconv.Itoa(r.cfg.RiverWorkers)}, nil, "started")
	if err != nil {
		return d, err
	}
	defer riv.stop()
	end, err := awaitKeys(ctx, recv, riv, n)
	if err != nil {
		return d, err
	}
	d.took = end.Sub(start)
	return d, finish(ctx, &d, recv, riv)
}

// backlogCeiling POSTs n tickets from ceilingSenders goroutines to a fresh
// receiver: what the receiver and loopback take with nothing stored and
// nothing to read first.
func (r *runner) backlogCeiling(ctx context.Context, name string, n int) (drain, error) {
	d := drain{tickets: n}
	dir, err := r.mkdir(name)
	if err != nil {
		return d, err
	}
	recv, err := r.startReceiver(ctx, dir, n, 0)
	if err != nil {
		return d, err
	}
	defer recv.stop()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = ceilingSenders, ceilingSenders
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	url := "http://" + recv.Addr("hook") + "/hook"
	prefix := newUUID()
	created := time.Now().UTC()
	post := func(i int) error {
		t := ticket.Ticket{
			Request: ticket.Request{RequestID: fmt.Sprintf("%s-%d", prefix, i), Tool: "create_ticket", Target: backlogTarget,
				Title: fmt.Sprintf("Nightly export failed (prefilled %d)", i), Body: sampleBody, Priority: "normal", Labels: []string{"export", "nightly"}},
			ID: fmt.Sprintf("tkt_%d", i), CreatedAt: created,
		}
		body, err := json.Marshal(webhook.Payload{Type: webhook.EventType, Timestamp: created, Data: t})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", t.RequestID)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("bench: the receiver answered %s", resp.Status)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, ceilingSenders)
	start := time.Now()
	for g := range ceilingSenders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := post(i); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return d, err
	}
	end, err := awaitKeys(ctx, recv, nil, n)
	if err != nil {
		return d, err
	}
	d.took = end.Sub(start)
	return d, finish(ctx, &d, recv, nil)
}

// riverVersion is the River module bench/riverbaseline was built with.
func (r *runner) riverVersion() string {
	bi, err := buildinfo.ReadFile(r.bin("riverbaseline"))
	if err != nil {
		return "(version unknown)"
	}
	for _, m := range bi.Deps {
		if m.Path == "github.com/riverqueue/river" {
			return m.Version
		}
	}
	return "(version unknown)"
}
