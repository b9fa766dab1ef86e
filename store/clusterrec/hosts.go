package clusterrec

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/maintenance"
	"ticketrelay/request"
	"ticketrelay/tracing"
)

// Heartbeat is a host's entry under "h.<host>": that it is alive, and how
// far its relay has published. Liveness is judged by the server's
// timestamps of the entries (the stream leader's clock), never by the
// hosts' own clocks.
type Heartbeat struct {
	Host     string `json:"host"`
	Hostname string `json:"hostname,omitempty"`
	// Watermark: every request this host accepted before it is in the
	// stream (its oldest unpublished outbox row's acceptance, or the
	// beat's time when none waits). What it left unpublished when lost
	// was accepted after it.
	Watermark time.Time `json:"watermark"`
	State     string    `json:"state"`                // HostLive, or HostAdopting/HostAdopted once another host took over
	By        string    `json:"adopted_by,omitempty"` // the host that adopted it
	// AdoptedUpTo: the records written before it (server time) were
	// looked at by the last adoption; the next one starts there. Quiet
	// counts the adoptions in a row that found nothing new.
	AdoptedUpTo time.Time `json:"adopted_up_to,omitzero"`
	Quiet       int       `json:"quiet,omitempty"`
}

// quietRounds is how many adoptions in a row must find nothing before a
// lost host's records stop being looked at: its mcp-front may accept for a
// while after its dispatcher was lost (it refuses once it sees itself
// adopted, see Front).
const quietRounds = 12

// Host states.
const (
	HostLive     = "live"
	HostAdopting = "adopting"
	HostAdopted  = "adopted"
)

// Pending is the part of the local ledger the heartbeat reads: the
// acceptance time of the oldest request not yet handed to the stream.
type Pending func(ctx context.Context) (oldest time.Time, ok bool, err error)

// HostsConfig tunes Hosts. Zero fields take the defaults.
type HostsConfig struct {
	// Every is how often this host beats and looks at the others.
	// Default 5s.
	Every time.Duration
	// DeadAfter is how long without a beat, while the bucket was
	// available to the host that judges (see view), makes a host lost:
	// the other hosts then publish and deliver what it left. Default 30s.
	DeadAfter time.Duration
	// Slack is how far before a lost host's watermark its requests are
	// looked for. Default 1m.
	Slack time.Duration
}

// WithDefaults fills zero fields.
func (c HostsConfig) WithDefaults() HostsConfig {
	c.Every = cmp.Or(c.Every, 5*time.Second)
	c.DeadAfter = cmp.Or(c.DeadAfter, 30*time.Second)
	c.Slack = cmp.Or(c.Slack, time.Minute)
	return c
}

// Hosts keeps this host's heartbeat and adopts what a lost host left
// behind: the requests it accepted (claimed, with the whole ticket, in the
// record) that were not yet in the stream when it was lost, and that no
// forwarder has settled. The adopting host commits them to its own ledger
// under their own names; its relay publishes them (Nats-Msg-Id drops a
// copy the lost host had published after all) and the record keeps the
// delivery to one.
//
// A host is lost when it has been silent for DeadAfter while the bucket
// was available: silence is counted on this host's own view of the
// bucket (see view), so that a NATS election or a hung node, which stops
// every host's beats alike, makes no live host look lost.
type Hosts struct {
	cfg     HostsConfig
	store   *Store
	local   Committer
	pending Pending
	log     *slog.Logger
	now     func() time.Time
	seen    map[string]bool // hosts this process has seen alive, for the log
	rounds  int             // RunOnce calls, for the sweep of parked requests

	mu   sync.Mutex // guards view: an adoption's lease beats beside the round
	view view
}

// NewHosts builds the heartbeat and adoption service of s's host.
func NewHosts(arch archetype.Archetype, cfg HostsConfig, s *Store, l Committer, pending Pending) *Hosts {
	arch = arch.WithDefaults()
	return &Hosts{cfg: cfg.WithDefaults(), store: s, local: l, pending: pending, log: arch.Logger, now: arch.Now, seen: map[string]bool{}}
}

// view is this host's view of the bucket's availability, in the server's
// time of its own beats: since when it has watched (first), and the
// stretches in which it could not beat (gaps). Another host's silence
// counts only the time this host watched and could beat: during a gap the
// others could not beat either (an election, a hung leader), or this host
// could not see them (its own node hung, this process stalled).
type view struct {
	first, last time.Time
	gaps        []gap
}

type gap struct{ from, to time.Time }

// maxGaps bounds the gaps kept; the oldest go first (a host silent since
// before them is long lost anyway).
const maxGaps = 256

// beatAt records a beat of this host at the server's time at: a beat
// later than every and a half after the previous one opens a gap from
// the moment it was due.
func (v *view) beatAt(at time.Time, every time.Duration) {
	switch {
	case v.first.IsZero():
		v.first = at
	case at.Sub(v.last) > every+every/2:
		v.gaps = append(v.gaps, gap{from: v.last.Add(every), to: at})
		if len(v.gaps) > maxGaps {
			v.gaps = v.gaps[len(v.gaps)-maxGaps:]
		}
	}
	if at.After(v.last) {
		v.last = at
	}
}

// silence is how long, up to now, an entry written at since has gone
// without a newer one while this host watched the bucket available.
func (v *view) silence(since, now time.Time) time.Duration {
	if since.Before(v.first) {
		since = v.first // before it watched, this host knows nothing
	}
	d := now.Sub(since)
	for _, g := range v.gaps {
		from, to := g.from, g.to
		if from.Before(since) {
			from = since
		}
		if to.After(now) {
			to = now
		}
		if to.After(from) {
			d -= to.Sub(from)
		}
	}
	return max(d, 0)
}

// adoptLease is how long an adopting host's mark, which it renews every
// heartbeat period while it adopts, stays its own: a mark older than
// that (the adopter was lost part-way) is taken over by another host.
func (c HostsConfig) adoptLease() time.Duration { return 3 * c.Every }

// Run beats and watches until ctx ends. A round that failed part-way
// (the bucket unavailable, an adoption cut off) is tried again at the
// next period.
func (h *Hosts) Run(ctx context.Context) error {
	return maintenance.Loop{Interval: h.cfg.Every, Eager: true, RunOnce: h.RunOnce, Log: h.log, Failed: "hosts: round failed"}.Run(ctx)
}

// sweepRounds: every so many rounds (the first included), the round also
// sweeps the requests parked on settled creates (Store.SweepParked). A
// settling write publishes them itself; the sweep is for a host lost
// between the two.
const sweepRounds = 12

// RunOnce beats once, adopts what each lost host left, and every
// sweepRounds rounds publishes the parked requests whose create settled.
func (h *Hosts) RunOnce(ctx context.Context) error {
	now, err := h.beat(ctx)
	if err != nil {
		return err
	}
	var errs []error
	if h.rounds++; h.rounds%sweepRounds == 1 {
		if n, err := h.store.SweepParked(ctx); err != nil {
			errs = append(errs, fmt.Errorf("hosts: sweep parked requests: %w", err))
		} else if n > 0 {
			h.log.Warn("hosts: published again requests left parked on settled creates", "requests", n)
		}
	}
	entries, err := h.others(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	v := h.view
	h.mu.Unlock()
	for _, e := range entries {
		var hb Heartbeat
		if err := json.Unmarshal(e.Value(), &hb); err != nil {
			errs = append(errs, fmt.Errorf("hosts: %s: %w", e.Key(), err))
			continue
		}
		silent := v.silence(e.Created(), now)
		switch {
		case hb.State == HostAdopted && hb.Quiet >= quietRounds:
		case hb.State == HostAdopted && now.Sub(e.Created()) < h.cfg.Every:
			// Adopted this round already.
		case hb.State == HostLive && silent < h.cfg.DeadAfter:
			if !h.seen[hb.Host] {
				h.seen[hb.Host] = true
				h.log.Info("hosts: a host of the installation is alive", "host", hb.Host, "hostname", hb.Hostname)
			}
		case hb.State == HostAdopting && hb.By != h.store.Host() && silent < h.cfg.adoptLease():
			// Another host is adopting it now and renews its mark. One
			// left by this host is a part-way adoption: it goes on now.
		default:
			if err := h.adopt(ctx, e.Key(), e.Revision(), hb, silent, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// others reads the other hosts' heartbeat entries.
func (h *Hosts) others(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
	var keys []string
	err := h.retry(ctx, func(ctx context.Context) error {
		keys = keys[:0]
		lister, err := h.store.kv.ListKeysFiltered(ctx, hostPrefix+">")
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("hosts: list: %w", err)
	}
	var entries []jetstream.KeyValueEntry
	for _, k := range keys {
		if k == hostPrefix+h.store.Host() {
			continue
		}
		var e jetstream.KeyValueEntry
		err := h.retry(ctx, func(ctx context.Context) error {
			var err error
			e, err = h.store.kv.Get(ctx, k)
			return err
		})
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
			continue // deleted (forgotten) since the listing
		case err != nil:
			return nil, fmt.Errorf("hosts: %s: %w", k, err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// retry runs op, each try within one OpTimeout, until it succeeds, it
// answers that the key is not there, or half of DeadAfter has passed: an
// operation caught by a lost leader is repeated against the next one as
// soon as it is elected, rather than waited on until the threshold.
func (h *Hosts) retry(ctx context.Context, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.DeadAfter/2)
	defer cancel()
	var err error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %w (gave up after %d tries)", ErrUnavailable, err, attempt)
			case <-time.After(pace.Delay(attempt)):
			}
		}
		octx, ocancel := context.WithTimeout(ctx, h.store.cfg.OpTimeout)
		err = op(octx)
		ocancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) ||
			errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || ctx.Err() != nil {
			return err
		}
	}
}

// heartbeat reads host's heartbeat.
func (s *Store) heartbeat(ctx context.Context, host string) (Heartbeat, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	var hb Heartbeat
	e, err := s.kv.Get(ctx, hostPrefix+host)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return hb, false, nil
	}
	if err != nil {
		return hb, false, err
	}
	return hb, true, json.Unmarshal(e.Value(), &hb)
}

// announce writes this host's heartbeat entry if it has none, on behalf
// of a dispatcher that has not beaten yet: live, with the watermark now
// (nothing was accepted before it). A dispatcher's beat replaces it; if
// none comes, the other hosts find it silent and adopt what was accepted
// since.
func (s *Store) announce(ctx context.Context) error {
	name, _ := os.Hostname()
	b, _ := json.Marshal(Heartbeat{Host: s.Host(), Hostname: name, Watermark: s.now().UTC(), State: HostLive})
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	if _, err := s.kv.Create(ctx, hostPrefix+s.Host(), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	return nil
}

// beat writes this host's heartbeat and returns the server's time of it,
// as the bucket's stream leader stored it.
func (h *Hosts) beat(ctx context.Context) (time.Time, error) {
	wm, ok, err := h.pending(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("hosts: oldest unpublished request: %w", err)
	}
	if !ok {
		wm = h.now()
	}
	name, _ := os.Hostname()
	b, _ := json.Marshal(Heartbeat{Host: h.store.Host(), Hostname: name, Watermark: wm.UTC(), State: HostLive})
	key := hostPrefix + h.store.Host()
	var at time.Time
	err = h.retry(ctx, func(ctx context.Context) error {
		rev, err := h.store.kv.Put(ctx, key, b)
		if err != nil {
			return err
		}
		m, found, err := h.store.leaderGet(ctx, map[string]any{"seq": rev})
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("%w: the beat's revision %d is not in the stream", ErrUnavailable, rev)
		}
		at = m.Time
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("hosts: beat: %w", err)
	}
	h.mu.Lock()
	h.view.beatAt(at, h.cfg.Every)
	h.mu.Unlock()
	return at, nil
}

// adopt takes over what lost host hb left: first the right to adopt (a
// compare-and-set on its heartbeat, so one host adopts at a time), then
// every unsettled request it holds in the record that was written since
// the last adoption (the first one: since its watermark). now is the
// server's time of this round. While it adopts, this host keeps beating
// and renews its mark (lease); a mark it cannot renew (the lost host beat
// again, or another host took the adoption over) ends the adoption.
func (h *Hosts) adopt(ctx context.Context, key string, rev uint64, hb Heartbeat, silent time.Duration, now time.Time) error {
	from := hb.Watermark.Add(-h.cfg.Slack)
	if !hb.AdoptedUpTo.IsZero() {
		from = hb.AdoptedUpTo.Add(-h.cfg.Every)
	}
	first := hb.State == HostLive
	hb.State, hb.By = HostAdopting, h.store.Host()
	mark, _ := json.Marshal(hb)
	err := h.retry(ctx, func(ctx context.Context) error {
		var err error
		rev, err = h.store.kv.Update(ctx, key, mark, rev)
		return err
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil // it beat again, or another host took it
		}
		return fmt.Errorf("hosts: adopt %s: %w", hb.Host, err)
	}
	if first {
		h.log.Warn("hosts: a host is lost; adopting what it left", "host", hb.Host, "hostname", hb.Hostname,
			"silent", silent.Round(time.Second), "watermark", hb.Watermark)
	}
	l := h.lease(ctx, key, rev, mark)
	keys, err := h.recordsSince(l.ctx, from, hb.Host)
	adopted := 0
	for _, k := range keys {
		if err != nil {
			break
		}
		var ok bool
		if ok, err = h.adoptRecord(l.ctx, k, hb.Host); ok {
			adopted++
		}
	}
	rev, lost := l.end()
	switch {
	case lost != nil:
		h.log.Warn("hosts: adoption ended: the host beat again, or another host took its adoption over",
			"host", hb.Host, "requests", adopted, "err", lost)
		return nil
	case err != nil:
		return fmt.Errorf("hosts: adopt %s (%d requests adopted so far; tried again next round): %w", hb.Host, adopted, err)
	}
	hb.State, hb.AdoptedUpTo = HostAdopted, now
	if hb.Quiet++; adopted > 0 {
		hb.Quiet = 0
	}
	b, _ := json.Marshal(hb)
	err = h.retry(ctx, func(ctx context.Context) error {
		_, err := h.store.kv.Update(ctx, key, b, rev)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return nil // it beat again meanwhile: it is live, what was adopted stays adopted
	case err != nil:
		return fmt.Errorf("hosts: adopt %s: %w", hb.Host, err)
	}
	if first || adopted > 0 {
		h.log.Warn("hosts: adopted a lost host's unpublished requests", "host", hb.Host, "requests", adopted, "looked_at", len(keys))
	}
	return nil
}

// lease renews an adoption's mark (key at rev, holding mark) every
// heartbeat period, and beats this host's own heartbeat beside it, until
// end. Its ctx ends when the mark could not be kept.
type lease struct {
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}
	rev  uint64
	lost error
}

func (h *Hosts) lease(ctx context.Context, key string, rev uint64, mark []byte) *lease {
	lctx, stop := context.WithCancel(ctx)
	l := &lease{ctx: lctx, stop: stop, done: make(chan struct{}), rev: rev}
	go func() {
		defer close(l.done)
		t := time.NewTicker(h.cfg.Every)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			if _, err := h.beat(lctx); err != nil && lctx.Err() == nil {
				h.log.Warn("hosts: beat while adopting failed", "err", err)
			}
			err := h.retry(lctx, func(ctx context.Context) error {
				n, err := h.store.kv.Update(ctx, key, mark, l.rev)
				if err == nil {
					l.rev = n
				}
				return err
			})
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				l.lost = err
				stop()
				return
			}
		}
	}()
	return l
}

// end stops the lease and returns the mark's last revision, or why the
// mark was lost.
func (l *lease) end() (uint64, error) {
	l.stop()
	<-l.done
	return l.rev, l.lost
}

// recordsSince lists the keys of the records written since from, whose
// host was lost (as the scan read them; adoptRecord reads them again).
func (h *Hosts) recordsSince(ctx context.Context, from time.Time, lost string) ([]string, error) {
	prefix := h.store.subject("")
	cons, err := h.store.js.OrderedConsumer(ctx, h.store.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + recordPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
	})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	seen := map[string]bool{}
	left := info.NumPending
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			left = md.NumPending
			var rec Record
			if json.Unmarshal(m.Data(), &rec) != nil || rec.Host != lost || rec.settled() {
				continue
			}
			if k := strings.TrimPrefix(m.Subject(), prefix); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
	}
	return keys, nil
}

// adoptRecord takes key's request over from host lost, if it is still
// that host's and unsettled: this host's ledger commits it first (its
// relay publishes it), then the record names this host. Killed in
// between, the record still names the lost host and the next adoption
// commits it again: the same ticket, and the stream and the record keep
// it to one delivery.
func (h *Hosts) adoptRecord(ctx context.Context, key, lost string) (bool, error) {
	rec, rev, found, err := h.store.get(ctx, key)
	if err != nil {
		return false, err
	}
	if !found || rec.Host != lost || rec.settled() {
		return false, nil
	}
	if rec.undecided() {
		// Cut between its claim and its group's decision: decided here as
		// a retry would, so that a report another host's group took in
		// meanwhile is committed as its occurrence, not as a second ticket.
		if rec, rev, err = h.decideGroup(ctx, key, rec, rev); err != nil || rec.Host != lost {
			return false, err
		}
	}
	req := rec.Ticket.Request
	// A new trace, linked to the claiming call's: its delivery follows it.
	ctx, span := tracing.StartAdoption(ctx, req.Scoped(), lost, rec.Trace)
	defer span.End()
	if err := h.store.indexing(ctx, rec.Ticket, 10*h.store.cfg.OpTimeout)(); err != nil { // a claim cut before its index keys (tickets.go)
		return false, err
	}
	if _, err := h.local.CreateAt(ctx, req, rec.ArgsHash, rec.Ticket.CreatedAt); err != nil {
		return false, fmt.Errorf("commit %s: %w", req.RequestID, err)
	}
	for {
		taken := rec
		taken.Host, taken.Phase, taken.Grouping = h.store.Host(), PhaseAccepted, nil
		switch _, err := h.store.update(ctx, key, taken, rev); {
		case err == nil:
			return true, nil
		case !errors.Is(err, errConflict):
			return false, err
		}
		// A delivery was recorded meanwhile, or another host took it.
		if rec, rev, found, err = h.store.get(ctx, key); err != nil || !found || rec.Host != lost {
			return err == nil, err
		}
	}
}

// decideGroup decides the fingerprint group of rec, an undecided claim of
// a lost host at rev under key (see grouper.decide), and returns the
// record to commit. A record a retry took over meanwhile is returned as
// read: no longer the lost host's.
func (h *Hosts) decideGroup(ctx context.Context, key string, rec Record, rev uint64) (Record, uint64, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*h.store.cfg.OpTimeout)
	defer cancel()
	c, err := (grouper{s: h.store, now: h.now}).decide(dctx, Claim{Record: rec, Rev: rev}, *rec.Grouping)
	if err == nil {
		return c.Record, c.Rev, nil
	}
	again, rev, found, rerr := h.store.get(ctx, key)
	if rerr == nil && (!found || again.Host != rec.Host) {
		return again, rev, nil
	}
	return rec, rev, fmt.Errorf("decide the fingerprint group of %s: %w", rec.Ticket.RequestID, err)
}

// settled reports whether the record's delivery needs nothing more.
func (r Record) settled() bool {
	return r.Delivery != nil && (request.Delivery{State: r.Delivery.State}).Settled()
}
