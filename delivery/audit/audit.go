// Package audit finds accepted tickets whose message the stream lost before
// any delivery, and has the relay publish them again.
//
// The relay marks an outbox row published once JetStream acknowledges the
// message, and records the stream sequence it was stored at. From then on the
// stream is the only copy on its way: a broker that acknowledged before its
// fsync (an external server without sync_interval: always) can lose it in a
// power cut, and a message that waits longer than the stream's MaxAge is
// removed. Either way the request would stay "published" (or "retrying")
// for ever. The auditor reads every published row once it is After old, in
// id order; a row with no delivery record, or with an unsettled one nobody
// has written for After, is looked up in the stream by its sequence, and if
// the stream does not hold that message id there, the row is queued again
// under a new message id (as an operator redrive does), with the same
// downstream dedupe key.
//
// Only the dispatcher that holds the relay lease audits, so that one process
// decides. A row is audited once per pass; a pass starts again from the
// first row every Rescan.
package audit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/maintenance"
	"ticketrelay/metrics"
	"ticketrelay/request"
)

// Store is the ledger's side of the audit.
type Store interface {
	PublishedAfter(ctx context.Context, after int64, limit int) ([]request.Published, error)
	LastID(ctx context.Context) (int64, error)
	RepublishLost(ctx context.Context, p request.Published) (bool, error)
	Served(ctx context.Context) (request.Served, error)
}

// Stream answers whether the stream stores msgID at seq.
type Stream interface {
	Holds(ctx context.Context, seq uint64, msgID string) (bool, error)
}

// Config tunes the auditor. Zero fields take the defaults.
type Config struct {
	// After is how long after its publish a row is audited. It must exceed
	// the time a broker may hold an acknowledged message before its fsync
	// (nats-server's default sync_interval is 2 minutes). Default 5m.
	After time.Duration
	// Interval is the wait between rounds once a pass has caught up.
	// Default a tenth of After, at most 10s.
	Interval time.Duration
	// Rescan is how often a pass starts again from the first row, so that a
	// message removed later (MaxAge, 7 days by default) is found too. A pass
	// reads every row of the ledger, so not often. Default 24h.
	Rescan time.Duration
	// Batch is how many rows a round reads. Default 1000.
	Batch int
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.After = cmp.Or(c.After, 5*time.Minute)
	c.Interval = cmp.Or(c.Interval, min(max(c.After/10, 10*time.Millisecond), 10*time.Second))
	c.Rescan = cmp.Or(c.Rescan, 24*time.Hour)
	c.Batch = cmp.Or(c.Batch, 1000)
	return c
}

// Auditor runs the audit; see the package comment.
type Auditor struct {
	cfg     Config
	store   Store
	stream  Stream
	leading func() bool
	log     *slog.Logger
	metrics *metrics.Dispatcher
	now     func() time.Time

	cursor   int64     // rows up to this id were audited in this pass
	passFrom time.Time // when this pass started
	warned   map[string]time.Time
}

// unservedWarnEvery spaces the warnings about one unserved target.
const unservedWarnEvery = time.Hour

// New builds an auditor that works only while leading() reports true.
func New(arch archetype.Archetype, cfg Config, store Store, stream Stream, leading func() bool) (*Auditor, error) {
	cfg = cfg.WithDefaults()
	if cfg.After < 0 || cfg.Interval <= 0 || cfg.Rescan <= 0 || cfg.Batch < 1 {
		return nil, fmt.Errorf("audit: invalid config %+v", cfg)
	}
	arch = arch.WithDefaults()
	return &Auditor{cfg: cfg, store: store, stream: stream, leading: leading, log: arch.Logger, metrics: arch.Metrics, now: arch.Now,
		warned: map[string]time.Time{}}, nil
}

// Run audits at once and then every Interval until ctx ends; it returns
// nil then.
func (a *Auditor) Run(ctx context.Context) error {
	return maintenance.Loop{Interval: a.cfg.Interval, Eager: true, RunOnce: a.catchUp, Log: a.log,
		Failed: "stream audit round failed"}.Run(ctx)
}

// catchUp runs rounds while this dispatcher leads and they read full
// batches.
func (a *Auditor) catchUp(ctx context.Context) error {
	for ctx.Err() == nil && a.leading() {
		if more, err := a.Round(ctx); err != nil || !more {
			return err
		}
	}
	return nil
}

// Round audits the next batch of rows. It reports whether a full batch was
// audited (there may be more at once).
func (a *Auditor) Round(ctx context.Context) (more bool, err error) {
	now := a.now()
	if a.passFrom.IsZero() || now.Sub(a.passFrom) >= a.cfg.Rescan {
		a.cursor, a.passFrom = 0, now
	}
	rows, err := a.store.PublishedAfter(ctx, a.cursor, a.cfg.Batch)
	if err != nil {
		return false, err
	}
	if len(rows) == 0 && a.cursor > 0 {
		// Ids are max(id)+1: once retention removed the newest rows, new
		// ones take ids at or below the cursor. Start the pass again
		// rather than skip them until the next one.
		last, err := a.store.LastID(ctx)
		if err != nil {
			return false, err
		}
		if last < a.cursor {
			a.log.Info("stream audit: ledger ids restarted below the audit's position; starting a new pass", "position", a.cursor, "last_id", last)
			a.cursor, a.passFrom = 0, now
		}
		return false, nil
	}
	var served *request.Served
	unserved := map[string]int{}
	defer a.reportUnserved(unserved, now)
	for _, p := range rows {
		if p.PublishedAt.IsZero() || now.Sub(p.PublishedAt) < a.cfg.After {
			// Not published yet, or too recently: this pass waits here, so
			// that rows are audited in id order and none is skipped.
			return false, nil
		}
		if a.due(p, now) {
			// Waiting (never attempted, or untouched for After): is anyone
			// going to deliver it?
			if served == nil {
				s, err := a.store.Served(ctx)
				if err != nil {
					return false, err
				}
				served = &s
			}
			if !served.Serves(p.Target) {
				unserved[p.Target]++
			}
			if err := a.check(ctx, p); err != nil {
				return false, err
			}
		}
		a.cursor = p.ID
	}
	return len(rows) == a.cfg.Batch, nil
}

// due reports whether p's message should be looked up: it has a sequence,
// and no delivery was recorded, or the last record is unsettled and was
// written After ago or more (the forwarder has not touched the request
// since: its message may have expired from the stream while a downstream
// was down). A request whose attempt is running is never due: -audit-after
// exceeds -delivery-timeout, and an attempt writes its record when it ends
// (or, for a target without a dedupe key, before it starts too).
func (a *Auditor) due(p request.Published, now time.Time) bool {
	switch {
	case p.Seq == 0:
		return false
	case p.Delivery == "":
		return true
	default:
		return !p.Settled() && now.Sub(p.DeliveryUpdated) >= a.cfg.After
	}
}

// check looks p's message up in the stream and queues it again if the
// stream does not hold it.
func (a *Auditor) check(ctx context.Context, p request.Published) error {
	a.metrics.AuditChecked.Inc()
	held, err := a.stream.Holds(ctx, p.Seq, p.MsgID())
	if err != nil || held {
		return err
	}
	again, err := a.store.RepublishLost(ctx, p)
	if err != nil {
		return err
	}
	if again {
		a.metrics.StreamLost.Inc()
		a.log.Warn("the stream no longer holds a published message that was never delivered; publishing it again",
			"request_id", p.RequestID, "msg_id", p.MsgID(), "seq", p.Seq, "published_at", p.PublishedAt)
	}
	return nil
}

// reportUnserved counts the requests a round found waiting (never
// attempted, or untouched for After) for a target no running dispatcher
// delivers to, and says so in the log (once an hour per
// target: a pass finds each such request once).
func (a *Auditor) reportUnserved(unserved map[string]int, now time.Time) {
	for target, n := range unserved {
		a.metrics.Unserved.WithLabelValues(target).Add(float64(n))
		if last, ok := a.warned[target]; ok && now.Sub(last) < unservedWarnEvery {
			continue
		}
		a.warned[target] = now
		a.log.Warn("requests wait for a target no running dispatcher delivers to; they stay stored and are delivered once one does: "+
			"give every dispatcher the same -config as mcp-front",
			"target", target, "requests", n)
	}
}
