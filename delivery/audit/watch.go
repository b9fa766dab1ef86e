package audit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/maintenance"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/outbox"
)

// The watcher keeps the stream in place under a running dispatcher. Anyone
// who reaches the broker's API can delete the stream, purge it, change its
// configuration, and a broker can come back without its store: the relay's
// publishes then failed until a restart, and what the stream had lost was
// published again only by the audit, After later. Every Interval (and at
// once after a failed publish) the watcher looks the stream up: it puts it
// back when it is gone or changed (natsjs.StreamWatch), and when the stream
// was recreated, purged or had messages deleted, it queues again, by the
// audit's own path (RepublishLost), every published request whose message
// the stream no longer holds and whose delivery is not settled. It scans at
// once, and again once the relay's batches that were in flight then are
// marked: a batch the old stream acknowledged can be marked published after
// the first scan read its row.

// Broker is the stream as the watcher sees it (natsjs.StreamWatch).
type Broker interface {
	Name() string
	Check(ctx context.Context) (natsjs.StreamState, string, error)
	State(ctx context.Context) (natsjs.StreamState, error)
	Stream
}

// Blocker records, for find_request, that this dispatcher cannot hand
// requests to the stream (ledger.Presence).
type Blocker interface {
	Blocked(ctx context.Context, since time.Time, reason string) error
	Unblocked(ctx context.Context) error
}

// Relay is this dispatcher's relay (outbox.Relay): the watcher queues
// messages again only while it leads (holds the lease: one dispatcher
// decides), and knows when the batches it had in flight are marked.
type Relay interface {
	Leading() bool
	InFlightDone() <-chan struct{}
}

var _ Relay = (*outbox.Relay)(nil)

// WatchConfig tunes the watcher. Zero fields take the defaults.
type WatchConfig struct {
	// Interval between two looks at the stream. Default 1s.
	Interval time.Duration
	// Timeout bounds one look (and a repair). Default 5s.
	Timeout time.Duration
	// MaxAge is the stream's: messages older than it are removed by the
	// stream's limit, which is not a loss to look for (the audit covers a
	// request that waited that long). Default 7 days.
	MaxAge time.Duration
	// Batch is how many outbox rows a scan reads at a time. Default 1000.
	Batch int
}

// WithDefaults returns c with every zero field set to its default.
func (c WatchConfig) WithDefaults() WatchConfig {
	c.Interval = cmp.Or(c.Interval, time.Second)
	c.Timeout = cmp.Or(c.Timeout, 5*time.Second)
	c.MaxAge = cmp.Or(c.MaxAge, 7*24*time.Hour)
	c.Batch = cmp.Or(c.Batch, 1000)
	return c
}

// expiryMargin: a first message this much younger than MaxAge that is gone
// was not removed by the age limit.
const expiryMargin = time.Minute

// unavailableLogEvery spaces the repeats of "the stream is unavailable".
const unavailableLogEvery = time.Minute

// Watcher runs the watch; see above.
type Watcher struct {
	cfg     WatchConfig
	store   Store
	broker  Broker
	blocker Blocker
	relay   Relay
	log     *slog.Logger
	metrics *metrics.Dispatcher
	now     func() time.Time
	pokes   Pokes

	prev       *natsjs.StreamState // the last state read; nil: none yet (or leadership just taken)
	owed       string              // why a scan is due ("": none)
	owedVerify bool                // the scan must look up messages within the stream's range too
	// inFlight is closed once the relay's batches in flight when the scan
	// fell due are marked. Only a scan that began after that settles the
	// debt; waiting: one ran before, and the next waits for it.
	inFlight   <-chan struct{}
	waiting    bool
	downSince  time.Time // the stream has been unavailable since then
	downLogged time.Time
	noted      bool // the blocked note is in the ledger
	probed     bool // the newest rows were compared with the stream since this dispatcher leads
}

// NewWatcher builds a watcher that queues messages again only while relay
// leads, and repairs the stream whatever it reports; a poke on pokes has it
// look at once.
func NewWatcher(arch archetype.Archetype, cfg WatchConfig, store Store, broker Broker, blocker Blocker, relay Relay, pokes Pokes) (*Watcher, error) {
	cfg = cfg.WithDefaults()
	if cfg.Interval <= 0 || cfg.Timeout <= 0 || cfg.MaxAge <= 0 || cfg.Batch < 1 {
		return nil, fmt.Errorf("audit: invalid watch config %+v", cfg)
	}
	arch = arch.WithDefaults()
	return &Watcher{cfg: cfg, store: store, broker: broker, blocker: blocker, relay: relay, log: arch.Logger, metrics: arch.Metrics, now: arch.Now,
		pokes: pokes}, nil
}

// Pokes asks a Watcher to look at the stream now. The publisher that pokes
// (PokeOnError) serves the relay a watcher is made with, so the pokes are
// made first, by the wiring, and handed to both.
type Pokes chan struct{}

// NewPokes makes the pokes of one watcher.
func NewPokes() Pokes { return make(Pokes, 1) }

// Poke has the watcher look at the stream now (a publish failed). It never
// blocks: a poke waiting already covers this one.
func (p Pokes) Poke() {
	select {
	case p <- struct{}{}:
	default:
	}
}

// PokeOnError returns p, poking when a publish fails: a stream deleted
// between two looks is put back at once.
func PokeOnError(p outbox.Publisher, pokes Pokes) outbox.Publisher {
	return pokingPublisher{p, pokes}
}

type pokingPublisher struct {
	outbox.Publisher
	pokes Pokes
}

func (p pokingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	res := p.Publisher.Publish(ctx, msgs)
	for _, r := range res {
		if r.Err != nil {
			p.pokes.Poke()
			break
		}
	}
	return res
}

// Run watches until ctx ends; it returns nil then. A round runs at once,
// then every Interval, on a poke, and when the relay's batches a scan
// waits for are marked.
func (w *Watcher) Run(ctx context.Context) error {
	return maintenance.Loop{Interval: w.cfg.Interval, Eager: true, Poke: w.pokes, Due: w.rescan, Log: w.log,
		RunOnce: func(ctx context.Context) error {
			if w.waiting && isClosed(w.inFlight) {
				w.waiting = false // this round's scan settles the debt
			}
			w.Round(ctx)
			return nil // Round logs what went wrong; the next round tries again
		}}.Run(ctx)
}

// rescan is the channel that says the scan waited for is due: the batches
// in flight at the last one are marked. nil (never ready) when none waits.
func (w *Watcher) rescan() <-chan struct{} {
	if !w.waiting {
		return nil
	}
	return w.inFlight
}

// Round looks at the stream once, repairs it and queues lost messages again.
func (w *Watcher) Round(ctx context.Context) {
	now := w.now()
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	st, repaired, err := w.broker.Check(cctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.unavailable(ctx, now, err)
		}
		return
	}
	w.available(ctx, now)
	if repaired != "" {
		w.metrics.StreamRepairs.WithLabelValues(repaired).Inc()
		switch repaired {
		case natsjs.RepairStreamMissing:
			w.log.Error("the stream was gone (deleted, or the broker lost its store); created it again: requests it held are published again",
				"stream", w.broker.Name())
		case natsjs.RepairStreamConfig:
			w.log.Error("the stream's configuration was changed under the dispatcher; set it back", "stream", w.broker.Name())
		}
	}
	if why, verify := w.suspect(st, repaired, now); why != "" {
		w.owe(why, verify)
	}
	w.prev = &st
	leading := w.relay.Leading()
	if !leading {
		w.probed = false
	} else if !w.probed {
		// Taking the lead (or starting): what happened to the stream
		// before is not known. The newest published rows tell.
		if err := w.probeTail(ctx); err != nil {
			w.log.Warn("stream watch: reading the newest outbox rows", "err", err)
			return // the probe runs again next round
		}
		w.probed = true
	}
	if w.owed != "" && leading {
		w.settle(ctx)
	}
}

// settle scans for lost messages: at once when they fell due, then once
// more after the relay's batches in flight at that moment are marked.
func (w *Watcher) settle(ctx context.Context) {
	marked := isClosed(w.inFlight)
	if w.waiting && !marked {
		return // Run wakes when they are
	}
	if err := w.scan(ctx); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("stream watch: looking for lost messages failed; trying again", "reason", w.owed, "err", err)
		}
		return
	}
	if !marked {
		w.waiting = true
		return
	}
	w.owed, w.owedVerify, w.inFlight, w.waiting = "", false, nil, false
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// suspect says whether st, compared with the last state, shows that the
// stream lost messages, and whether the ones in its range must be looked up
// too (a recreated stream reuses sequences; messages deleted inside it).
func (w *Watcher) suspect(st natsjs.StreamState, repaired string, now time.Time) (why string, verify bool) {
	p := w.prev
	switch {
	case repaired == natsjs.RepairStreamMissing:
		return "the stream was created again", true
	case p == nil:
		return "", false
	case !st.Created.Equal(p.Created) || st.LastSeq < p.LastSeq:
		return "the stream was deleted and created again", true
	case st.Deleted > p.Deleted:
		return "messages were deleted from the stream", true
	case st.FirstSeq > p.FirstSeq && (st.FirstSeq > p.LastSeq+1 || p.Msgs > 0 && p.FirstTime.After(now.Add(-w.cfg.MaxAge+expiryMargin))):
		// Messages went from the front that the age limit did not remove:
		// stored after the last look (younger than Interval), or after a
		// first message younger than MaxAge.
		return "the stream was purged", false
	}
	return "", false
}

func (w *Watcher) owe(why string, verify bool) {
	if w.owed == "" {
		w.owed = why
	}
	w.owedVerify = w.owedVerify || verify
	w.inFlight, w.waiting = w.relay.InFlightDone(), false
}

// probeTail reads the newest outbox rows, then the stream: a published row
// with a sequence beyond the stream's last one means the stream was reset,
// an undelivered one below its first that it was purged (while this
// dispatcher was not looking).
func (w *Watcher) probeTail(ctx context.Context) error {
	last, err := w.store.LastID(ctx)
	if err != nil {
		return err
	}
	rows, err := w.store.PublishedAfter(ctx, max(0, last-int64(w.cfg.Batch)), w.cfg.Batch)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	st, err := w.broker.State(cctx)
	cancel()
	if err != nil {
		return err
	}
	for _, p := range rows {
		switch {
		case p.PublishedAt.IsZero() || p.Seq == 0:
		case p.Seq > st.LastSeq:
			w.owe("the stream ends before messages the ledger has published (reset while this dispatcher was not looking)", true)
			return nil
		case p.Seq < st.FirstSeq && !p.Settled():
			w.owe("the stream starts after undelivered messages the ledger has published (purged while this dispatcher was not looking)", false)
		}
	}
	return nil
}

// scan reads every outbox row and queues again each published one whose
// delivery is not settled and whose message the stream no longer holds.
// Rows are read before the stream's state: a row marked published after the
// state was read could be taken for one beyond its end.
func (w *Watcher) scan(ctx context.Context) error {
	began := w.now()
	var after int64
	var created time.Time
	n := 0
	for {
		rows, err := w.store.PublishedAfter(ctx, after, w.cfg.Batch)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
		st, err := w.broker.State(cctx)
		cancel()
		if err != nil {
			return err
		}
		if created.IsZero() {
			created = st.Created
		} else if !st.Created.Equal(created) {
			return fmt.Errorf("the stream was created again during the scan")
		}
		for _, p := range rows {
			lost, err := w.lost(ctx, p, st)
			if err != nil {
				return err
			}
			if lost {
				again, err := w.store.RepublishLost(ctx, p)
				if err != nil {
					return err
				}
				if again {
					n++
					w.metrics.StreamLost.Inc()
				}
			}
			after = p.ID
		}
		if len(rows) < w.cfg.Batch {
			break
		}
	}
	if n > 0 {
		w.metrics.StreamRepairs.WithLabelValues("stream_lost").Inc()
		w.log.Error("the stream lost published requests before they were delivered; publishing them again (same dedupe keys)",
			"stream", w.broker.Name(), "reason", w.owed, "requests", n, "took", w.now().Sub(began).Round(time.Millisecond))
	} else {
		w.log.Info("stream watch: no undelivered request was lost", "stream", w.broker.Name(), "reason", w.owed)
	}
	return nil
}

// lost reports whether p's message is one the stream no longer holds and
// whose delivery still needs it.
func (w *Watcher) lost(ctx context.Context, p request.Published, st natsjs.StreamState) (bool, error) {
	if p.PublishedAt.IsZero() || p.Seq == 0 || p.Settled() {
		return false, nil
	}
	if p.Seq < st.FirstSeq || p.Seq > st.LastSeq {
		return true, nil
	}
	if !w.owedVerify {
		return false, nil
	}
	held, err := w.broker.Holds(ctx, p.Seq, p.MsgID())
	return !held, err
}

// unavailable records that the stream cannot be reached or put back: in the
// log (at once, then every unavailableLogEvery) and in the ledger, where
// find_request reads it.
func (w *Watcher) unavailable(ctx context.Context, now time.Time, err error) {
	if w.downSince.IsZero() {
		w.downSince = now
	}
	if w.downLogged.IsZero() || now.Sub(w.downLogged) >= unavailableLogEvery {
		w.downLogged = now
		w.log.Error("the stream is unavailable: requests wait in the outbox and are handed over when it is back; retrying every second",
			"stream", w.broker.Name(), "since", w.downSince.UTC().Format(time.RFC3339), "err", err)
	}
	if !w.noted {
		reason := err.Error()
		if len(reason) > 300 {
			reason = reason[:300] + "…"
		}
		if err := w.blocker.Blocked(ctx, w.downSince, reason); err != nil {
			w.log.Warn("stream watch: recording the blocked delivery in the ledger", "err", err)
		} else {
			w.noted = true
		}
	}
}

func (w *Watcher) available(ctx context.Context, now time.Time) {
	if !w.downSince.IsZero() {
		w.log.Info("the stream is available again", "stream", w.broker.Name(), "unavailable_for", now.Sub(w.downSince).Round(time.Millisecond))
		w.downSince, w.downLogged = time.Time{}, time.Time{}
	}
	if w.noted {
		if err := w.blocker.Unblocked(ctx); err != nil {
			w.log.Warn("stream watch: clearing the blocked delivery in the ledger", "err", err)
		} else {
			w.noted = false
		}
	}
}
