package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"ticketrelay/delivery/forwarder"
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
// held to a share of what its workers can do at that latency; last, the
// memory a drain holds: the dispatcher's peak with its embedded nats-server,
// and both processes' peaks with the broker as a process of its own.

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
		d, err := r.backlogRelay(ctx, fmt.Sprintf("s8-relay-%d", len(relay)+1), n, 0, profile, "")
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
	// Information only (decision 0125): the ceiling stores nothing, so it
	// moves with the box's HTTP speed more than the pipeline does; delivery
	// is held to River and to the dispatcher's CPU per ticket instead.
	r.rep.add(row{"8", "the same vs plain concurrent POSTs (the ceiling)", fmt.Sprintf("same rounds; ceiling: %d goroutines of the load generator POSTing the same payloads, nothing stored", ceilingSenders),
		perSec(rt), perSec(rc) + " plain POSTs", times(ratio(rt, rc)), "—", "info"})
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
	d, err := r.backlogRelay(ctx, "s8-slow", sn, lat, "", "")
	if err != nil {
		return err
	}
	bound := float64(workers) / lat.Seconds()
	r.rep.add(row{"8", fmt.Sprintf("the same to a receiver answering in %s", lat),
		fmt.Sprintf("%s-ticket backlog, one run, dispatcher defaults (at most %d calls in flight, from %d); bound = workers ÷ latency", count3(sn), workers, forwarder.StartConcurrency),
		perSec(d.rate()), perSec(bound) + " bound", times(ratio(d.rate(), bound)), "≥ 0.8×", verdict(ratio(d.rate(), bound) >= 0.8 && d.recv.Duplicates == 0)})
	r.rep.detail("8 ticketrelay, receiver answering in %s: %s", lat, d)
	return r.backlogMemory(ctx, n, relay, rt)
}

// backlogMemory reports the dispatcher's peak RSS in the rounds of relay
// (with its embedded nats-server, at rate rt), then drains the same backlog
// once more with the broker as a process of its own and reports both
// processes' peaks: the embedded server's blocks and duplicate window are
// most of what a draining dispatcher holds beyond its binary (decisions
// 0064, 0080, 0081).
func (r *runner) backlogMemory(ctx context.Context, n int, relay []drain, rt float64) error {
	rss := int64(median(relay, func(d drain) float64 { return float64(d.rss) }))
	// Information only (decision 0125): with the broker embedded, a draining
	// dispatcher holds the broker's blocks and duplicate window too; the
	// 60 MB target is held per process in the row below.
	r.rep.add(row{"8", "peak RSS of the dispatcher while draining",
		fmt.Sprintf("the %d ticketrelay runs above (median); embedded nats-server, its stream blocks and duplicate window included", len(relay)),
		mib(rss), "—", "—", "—", "info"})
	dir, err := r.mkdir("s8-broker")
	if err != nil {
		return err
	}
	broker, url, err := r.startBroker(ctx, dir)
	if err != nil {
		return err
	}
	defer broker.stop()
	d, err := r.backlogRelay(ctx, "s8-relay-broker", n, 0, "", url)
	if err != nil {
		return err
	}
	bRSS, err := broker.peakRSS()
	if err != nil {
		return err
	}
	bCPU, err := cpuTime(broker.Pid())
	if err != nil {
		return err
	}
	if err := broker.stop(); err != nil {
		return err
	}
	r.rep.add(row{"8", "the same with the broker as its own process (-nats)",
		fmt.Sprintf("%s-ticket backlog, one run, dispatcher defaults with -nats: a nats-server process of its own (the pinned module's, JetStream sync_interval: always, Go's default GC), "+
			"as a production deployment runs it; peak RSS of each process", count3(n)),
		fmt.Sprintf("dispatcher %s, nats-server %s", mib(d.rss), mib(bRSS)), "—", "—", "≤ 60 MB each",
		verdict(d.rss <= memoryTarget && bRSS <= memoryTarget && d.recv.Duplicates == 0)})
	r.rep.add(row{"8", "that drain's throughput against the embedded broker's", "same run; the embedded broker's: the ticketrelay runs above (median)",
		perSec(d.rate()), perSec(rt) + " embedded", times(ratio(d.rate(), rt)), "—", "info"})
	r.rep.detail("8 ticketrelay, broker as its own process: %s; nats-server CPU %d µs/ticket (from its start), peak RSS %s",
		d, (bCPU / time.Duration(n)).Microseconds(), mib(bRSS))
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
