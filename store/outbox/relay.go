package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/failpoint"
	"ticketrelay/metrics"
)

// TxRunner runs fn in a durable transaction (the ledger's group-commit writer).
type TxRunner interface {
	InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error
}

// Publisher sends messages to the broker with Nats-Msg-Id = RequestID and
// waits for every acknowledgement. results[i] answers msgs[i]. A duplicate
// acknowledgement is a success: the broker already stores that message.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) []PublishResult
}

// PublishResult is the broker's answer to one message.
type PublishResult struct {
	Duplicate bool
	// Seq is the stream sequence that holds the message (for a duplicate,
	// the earlier copy's); 0 if the broker did not say.
	Seq uint64
	Err error
}

// Relay publishes committed outbox rows to the broker and marks them
// published once acknowledged. A crash between the acknowledgement and the
// mark republishes the rows; the broker drops them by Nats-Msg-Id.
type Relay struct {
	cfg     RelayConfig
	read    *sql.DB
	tx      TxRunner
	pub     Publisher
	lease   *Lease
	leading atomic.Bool // the lease is held
	batches epochs      // batches between their publish and their mark
	log     *slog.Logger
	metrics *metrics.Dispatcher
	now     func() time.Time
	// pendingStmt is the round's read, prepared once: a round that finds
	// nothing is little more than this query, and parsing it was half its
	// cost (a relay without wake-ups polls every BusyPollInterval while
	// rows flow).
	pendingStmt *sql.Stmt // used by Run's goroutine only
}

// NewRelay builds a relay reading from read (a read-only pool of the same
// database) and writing through tx.
func NewRelay(arch archetype.Archetype, cfg RelayConfig, read *sql.DB, tx TxRunner, pub Publisher) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	arch = arch.WithDefaults()
	return &Relay{
		cfg: cfg, read: read, tx: tx, pub: pub, log: arch.Logger, metrics: arch.Metrics, now: arch.Now,
		lease: &Lease{Name: "relay", Holder: cfg.Holder, TTL: cfg.LeaseTTL, Tx: tx, Now: arch.Now, Dead: cfg.Predecessor},
	}, nil
}

// relayState is what Run carries from one round to the next.
type relayState struct {
	fl         *inflight
	held       bool
	leaseUntil time.Time // renew when the clock passes this
	gaugeAt    time.Time
	failures   int
	after      int64     // rows up to this id are in flight: read past them
	lastRows   time.Time // when a round last found rows
	rescanned  time.Time // when the pipeline was last drained to read from the start
	wake       *wakeups  // listening while the lease is held; nil: polling
	wakeFailed bool      // binding the socket failed once (logged once)
}

// Run relays until ctx is cancelled, then releases the lease. It returns nil
// on cancellation.
func (r *Relay) Run(ctx context.Context) error {
	s := &relayState{fl: newInflight(r.cfg.Pipeline)}
	defer r.stop(ctx, s)
	for {
		now := r.now()
		if !s.held || now.After(s.leaseUntil) {
			r.renewLease(ctx, s, now)
			if !s.held {
				// A standby polls more often than a holder renews, so that it
				// takes over soon after a clean release.
				if !sleep(ctx, min(r.cfg.LeaseTTL/3, 10*r.cfg.PollInterval), nil) {
					return nil
				}
				continue
			}
		}
		wait := r.round(ctx, s, now)
		if ctx.Err() != nil {
			return nil
		}
		if wait > 0 && !sleep(ctx, wait, s.woken()) {
			return nil
		}
	}
}

// woken is the channel wake-ups arrive on; nil (never ready) while the
// relay polls.
func (s *relayState) woken() <-chan struct{} {
	if s.wake == nil {
		return nil
	}
	return s.wake.c
}

// stop ends Run: a batch in flight finishes (or fails) before the lease
// goes, and the lease is given back so that a successor need not wait for
// it to expire.
func (r *Relay) stop(ctx context.Context, s *relayState) {
	s.fl.drain()
	r.unlisten(s)
	if r.pendingStmt != nil {
		r.pendingStmt.Close()
		r.pendingStmt = nil
	}
	r.leading.Store(false)
	r.metrics.LeaseHeld.Set(0)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.lease.Release(rctx); err != nil {
		r.log.Warn("releasing relay lease", "err", err)
	}
}

// renewLease takes or renews the lease. A relay that does not hold it
// waits for its batches in flight and reads from the start once it does.
func (r *Relay) renewLease(ctx context.Context, s *relayState, now time.Time) {
	ok, err := r.lease.Acquire(ctx)
	switch {
	case err != nil:
		r.log.Warn("relay lease", "err", err)
	case ok && !s.held:
		r.log.Info("relay lease acquired", "holder", r.cfg.Holder)
	case !ok && s.held:
		r.log.Warn("relay lease lost to another dispatcher")
	}
	s.held = ok && err == nil
	r.leading.Store(s.held)
	r.metrics.LeaseHeld.Set(b2f(s.held))
	s.leaseUntil = now.Add(r.cfg.LeaseTTL / 3)
	if !s.held {
		r.unlisten(s)
		s.fl.drain()
		s.after = 0
		return
	}
	r.listen(s)
}

// listen binds the wake-up socket, if the relay has one and is not
// listening yet. Only the lease holder listens: the processes that commit
// rows wake whoever is bound at the path.
func (r *Relay) listen(s *relayState) {
	if s.wake != nil || r.cfg.WakeupPath == "" {
		return
	}
	w, err := listenWakeups(r.cfg.WakeupPath, r.metrics.RelayWakeups.Inc)
	if err != nil {
		if !s.wakeFailed {
			s.wakeFailed = true
			r.log.Warn("relay wake-ups off: polling for committed rows instead", "err", err)
		}
		return
	}
	s.wake = w
	r.log.Info("relay listening for wake-ups", "socket", r.cfg.WakeupPath)
}

func (r *Relay) unlisten(s *relayState) {
	if s.wake != nil {
		s.wake.close()
		s.wake = nil
	}
}

// round reads the next batch and sends it on its way, collects the
// outcome of batches in flight, and returns the wait before the next round.
func (r *Relay) round(ctx context.Context, s *relayState, now time.Time) time.Duration {
	if now.After(s.gaugeAt) {
		r.refreshGauges(ctx)
		s.gaugeAt = now.Add(r.cfg.GaugeInterval)
	}
	msgs, err := r.pending(ctx, s.after)
	if err == nil && len(msgs) > 0 {
		// A batch once sent runs to its marks even if the relay is told
		// to stop (the publisher's ack timeout bounds it): abandoning its
		// acks would leave rows the stream stores unmarked, to be
		// published again at the next start, and after a stop longer
		// than the duplicate window stored twice.
		s.fl.start(ctx, func() error { return r.publish(context.WithoutCancel(ctx), msgs) })
	}
	full := len(msgs) == r.cfg.BatchSize
	// Batches in flight are waited for only to read from the start
	// again: when none is left, or RescanEvery after the last time,
	// and every round while recovering from a failure, so the retry's
	// outcome is known before the next one (else the backoff would
	// restart at its first step). Otherwise the next round reads past
	// them at once, so rows committed while a batch waits for its acks
	// and its mark (the write lock is busy) go out without waiting.
	rescan := err != nil || s.failures > 0 || (!full && (s.fl.idle() || now.Sub(s.rescanned) >= r.cfg.RescanEvery))
	if rescan {
		err = errors.Join(err, s.fl.drain())
	} else {
		err = s.fl.err()
	}
	if ctx.Err() != nil {
		return 0
	}
	wait := r.next(s, now, msgs, full, rescan, err)
	if len(msgs) > 0 {
		s.lastRows = now
	}
	return wait
}

// next moves s past a round that read msgs and ended in err, and returns
// the wait before the next round.
func (r *Relay) next(s *relayState, now time.Time, msgs []Message, full, rescan bool, err error) time.Duration {
	if err != nil {
		s.fl.drain()
		s.after, s.rescanned = 0, r.now()
		s.failures++
		wait := r.cfg.ErrorBackoff.Delay(s.failures)
		r.log.Warn("relay round failed", "err", err, "failures", s.failures, "retry_in", wait)
		return wait
	}
	s.failures = 0
	switch {
	case rescan:
		// Reading from the start picks up rows whose publish failed and
		// rows an operator redrove.
		s.after, s.rescanned = 0, r.now()
	case len(msgs) > 0:
		s.after = msgs[len(msgs)-1].ID
	}
	switch {
	case full:
		return 0 // there is more: go on at once
	case s.wake != nil:
		// The next commit wakes the relay; the poll is for what no wake-up
		// announces (an operator's redrive from an older build, a lost
		// datagram).
		return r.cfg.PollInterval
	case len(msgs) == 0 && now.Sub(s.lastRows) >= r.cfg.BusyFor:
		return r.cfg.PollInterval
	}
	// Tickets are flowing: look again soon, so a busy system's commit→ack
	// lag is not the idle poll interval.
	return r.cfg.BusyPollInterval
}

// Leading reports whether this relay holds the lease: it is the one
// dispatcher of the database that publishes.
func (r *Relay) Leading() bool { return r.leading.Load() }

// InFlightDone returns a channel closed once every batch the relay has
// begun to publish is marked published (where the broker acknowledged it)
// or has failed. Batches begun after the call do not hold it up.
//
// The stream watcher waits on it after it put the stream back or found it
// purged: a batch the old stream acknowledged whose mark commits after the
// watcher's scan would otherwise stay published under a sequence the stream
// no longer holds, until the audit found it.
func (r *Relay) InFlightDone() <-chan struct{} { return r.batches.end() }

// publish sends one batch and marks the acknowledged rows published.
func (r *Relay) publish(ctx context.Context, msgs []Message) error {
	ep := r.batches.enter()
	defer r.batches.leave(ep)
	spans := startPublishSpans(msgs, r.cfg.Subject)
	results := r.pub.Publish(ctx, msgs)
	failpoint.Hit(failpoint.RelayAfterPublish)
	endPublishSpans(spans, results)
	acked := make([]stored, 0, len(msgs))
	var firstErr error
	for i, res := range results {
		if res.Err != nil {
			r.metrics.PublishErrors.Inc()
			firstErr = cmp.Or(firstErr, res.Err)
			continue
		}
		if res.Duplicate {
			r.metrics.DuplicateAcks.Inc()
		}
		acked = append(acked, stored{msgs[i], res.Seq})
	}
	if err := r.markPublished(ctx, acked); err != nil {
		return err
	}
	if firstErr != nil {
		return fmt.Errorf("outbox: %d of %d publishes failed: %w", len(msgs)-len(acked), len(msgs), firstErr)
	}
	return nil
}

// pending reads the next batch of unpublished rows with ids above after.
// Ids grow in commit order (the ledger allocates them under the write
// lock), so a row committed later never has an id below one read before.
func (r *Relay) pending(ctx context.Context, after int64) ([]Message, error) {
	if r.pendingStmt == nil {
		s, err := r.read.PrepareContext(ctx,
			`SELECT id, request_id, subject, payload, created_at, generation, coalesce(traceparent, ''), coalesce(tracestate, '') FROM outbox
			 WHERE published_at IS NULL AND id > ? ORDER BY id LIMIT ?`)
		if err != nil {
			return nil, fmt.Errorf("outbox: prepare the pending read: %w", err)
		}
		r.pendingStmt = s
	}
	rows, err := r.pendingStmt.QueryContext(ctx, after, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("outbox: read pending: %w", err)
	}
	defer rows.Close()
	var msgs []Message
	for rows.Next() {
		var m Message
		var created int64
		if err := rows.Scan(&m.ID, &m.RequestID, &m.Subject, &m.Payload, &created, &m.Generation, &m.TraceParent, &m.TraceState); err != nil {
			return nil, fmt.Errorf("outbox: scan pending: %w", err)
		}
		m.CreatedAt = time.Unix(0, created)
		msgs = append(msgs, m)
	}
	return msgs, rows.Err()
}

// stored is a message the broker acknowledged, and where it stored it.
type stored struct {
	Message
	seq uint64
}

func (r *Relay) markPublished(ctx context.Context, acked []stored) error {
	if len(acked) == 0 {
		return nil
	}
	now := r.now()
	err := r.tx.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// Only the generation that was published: an operator's redrive
		// between the ack and this mark queued a new one, which must still
		// go out.
		stmt, err := tx.PrepareContext(ctx, `UPDATE outbox SET published_at = ?, stream_seq = ?
			WHERE id = ? AND generation = ? AND published_at IS NULL`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, m := range acked {
			var seq sql.NullInt64
			if m.seq > 0 {
				seq = sql.NullInt64{Int64: int64(m.seq), Valid: true}
			}
			if _, err := stmt.ExecContext(ctx, now.UnixNano(), seq, m.ID, m.Generation); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: mark %d rows published: %w", len(acked), err)
	}
	for _, m := range acked {
		r.metrics.Dispatched.WithLabelValues(TargetOf(m.Subject)).Inc()
		r.metrics.CommitToAck.Observe(now.Sub(m.CreatedAt).Seconds())
	}
	return nil
}

func (r *Relay) refreshGauges(ctx context.Context) {
	n, oldest, err := Backlog(ctx, r.read)
	if err != nil {
		r.log.Warn("outbox backlog", "err", err)
		return
	}
	r.metrics.OutboxBacklog.Set(float64(n))
	age := 0.0
	if !oldest.IsZero() {
		age = max(0, r.now().Sub(oldest).Seconds())
	}
	r.metrics.OutboxOldestAge.Set(age)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sleep waits d, or until wake delivers, or until ctx is done; it reports
// whether ctx is still live.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}
