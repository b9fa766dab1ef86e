package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
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

// RelayConfig tunes the relay. Zero fields take the documented defaults.
type RelayConfig struct {
	// Holder identifies this relay in the lease table. Required.
	Holder string
	// Predecessor is a holder known to be dead (see Lease.Dead): a lease it
	// still holds is taken at once. Optional.
	Predecessor string
	// BatchSize is the most rows read and published per round. Default 512.
	BatchSize int
	// Pipeline is how many batches may be in flight at once: while one
	// waits for its acknowledgements and its mark, the next is read and
	// published. Default 8: 4,096 messages with the default batch, the
	// publisher's async window (make bench scenario 4: 0.80x raw publish
	// with 4 batches, 0.93x with 8).
	Pipeline int
	// PollInterval is the wait after a round that found nothing. Default 20ms.
	PollInterval time.Duration
	// BusyPollInterval is the wait after a round that published a partial
	// batch, or found none less than BusyFor after one that published:
	// rows are arriving, so the next are likely there soon. Default 2ms
	// (make bench: commit→delivered p50 16 ms → 4 ms at 50 tickets/s).
	BusyPollInterval time.Duration
	// BusyFor is how long after the last row it published the relay keeps
	// polling at BusyPollInterval. At 100 tickets/s most rounds find
	// nothing, and the idle interval alone would add half of it to the lag.
	// Default 1s.
	BusyFor time.Duration
	// LeaseTTL is how long the lease lasts without renewal; it is renewed
	// every third of it. A crashed relay's successor waits at most this long.
	// Default 15s.
	LeaseTTL time.Duration
	// GaugeInterval is how often the backlog gauges are refreshed. Default 1s.
	GaugeInterval time.Duration
	// RescanEvery bounds how long rows keep flowing before a round that
	// found less than a full batch waits for every batch in flight and
	// reads from the start again (rows whose publish failed are picked up
	// at once anyway; an operator's redrive waits for this). A backlog
	// of full batches is read through first. Default 1s.
	RescanEvery time.Duration
	// ErrorBackoff paces rounds after a failure. Default 50ms up to 5s.
	ErrorBackoff backoff.Policy
}

// WithDefaults returns c with every zero field set to its default.
func (c RelayConfig) WithDefaults() RelayConfig {
	c.BatchSize = cmp.Or(c.BatchSize, 512)
	c.Pipeline = cmp.Or(c.Pipeline, 8)
	c.PollInterval = cmp.Or(c.PollInterval, 20*time.Millisecond)
	c.BusyPollInterval = cmp.Or(c.BusyPollInterval, min(2*time.Millisecond, c.PollInterval))
	c.BusyFor = cmp.Or(c.BusyFor, time.Second)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 15*time.Second)
	c.GaugeInterval = cmp.Or(c.GaugeInterval, time.Second)
	c.RescanEvery = cmp.Or(c.RescanEvery, time.Second)
	if c.ErrorBackoff == (backoff.Policy{}) {
		c.ErrorBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}
	}
	return c
}

func (c RelayConfig) validate() error {
	if c.Holder == "" {
		return errors.New("outbox: relay needs a Holder")
	}
	if c.BatchSize < 1 || c.Pipeline < 1 || c.PollInterval <= 0 || c.RescanEvery <= 0 || c.LeaseTTL < time.Second {
		return fmt.Errorf("outbox: invalid relay config %+v", c)
	}
	return nil
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
	log     *slog.Logger
	metrics *metrics.Dispatcher
	now     func() time.Time
	// pendingStmt is the round's read, prepared once: a round that finds
	// nothing is little more than this query, and parsing it was half its
	// cost (at 100 tickets/s the relay polls 500 times a second).
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

// Run relays until ctx is cancelled, then releases the lease. It returns nil
// on cancellation.
func (r *Relay) Run(ctx context.Context) error {
	fl := newInflight(r.cfg.Pipeline)
	defer func() {
		fl.drain() // a batch in flight finishes (or fails) before the lease goes
		if r.pendingStmt != nil {
			r.pendingStmt.Close()
			r.pendingStmt = nil
		}
		r.leading.Store(false)
		r.metrics.LeaseHeld.Set(0)
		// Give the lease back so a successor need not wait for it to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := r.lease.Release(rctx); err != nil {
			r.log.Warn("releasing relay lease", "err", err)
		}
	}()
	var (
		held       bool
		leaseUntil time.Time // renew when the clock passes this
		gaugeAt    time.Time
		failures   int
		after      int64     // rows up to this id are in flight: read past them
		lastRows   time.Time // when a round last found rows
		rescanned  time.Time // when the pipeline was last drained to read from the start
	)
	for {
		now := r.now()
		if !held || now.After(leaseUntil) {
			ok, err := r.lease.Acquire(ctx)
			switch {
			case err != nil:
				r.log.Warn("relay lease", "err", err)
			case ok && !held:
				r.log.Info("relay lease acquired", "holder", r.cfg.Holder)
			case !ok && held:
				r.log.Warn("relay lease lost to another dispatcher")
			}
			held = ok && err == nil
			r.leading.Store(held)
			r.metrics.LeaseHeld.Set(b2f(held))
			leaseUntil = now.Add(r.cfg.LeaseTTL / 3)
			if !held {
				fl.drain()
				after = 0
				// A standby polls more often than a holder renews, so that it
				// takes over soon after a clean release.
				if !sleep(ctx, min(r.cfg.LeaseTTL/3, 10*r.cfg.PollInterval)) {
					return nil
				}
				continue
			}
		}
		if now.After(gaugeAt) {
			r.refreshGauges(ctx)
			gaugeAt = now.Add(r.cfg.GaugeInterval)
		}
		msgs, err := r.pending(ctx, after)
		if err == nil && len(msgs) > 0 {
			// A batch once sent runs to its marks even if the relay is told
			// to stop (the publisher's ack timeout bounds it): abandoning its
			// acks would leave rows the stream stores unmarked, to be
			// published again at the next start, and after a stop longer
			// than the duplicate window stored twice.
			fl.start(ctx, func() error { return r.publish(context.WithoutCancel(ctx), msgs) })
		}
		full := len(msgs) == r.cfg.BatchSize
		// Batches in flight are waited for only to read from the start
		// again: when none is left, or RescanEvery after the last time,
		// and every round while recovering from a failure, so the retry's
		// outcome is known before the next one (else the backoff would
		// restart at its first step). Otherwise the next round reads past
		// them at once, so rows committed while a batch waits for its acks
		// and its mark (the write lock is busy) go out without waiting.
		rescan := err != nil || failures > 0 || (!full && (fl.idle() || now.Sub(rescanned) >= r.cfg.RescanEvery))
		if rescan {
			err = errors.Join(err, fl.drain())
		} else {
			err = fl.err()
		}
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fl.drain()
			after, rescanned = 0, r.now()
			failures++
			wait = r.cfg.ErrorBackoff.Delay(failures)
			r.log.Warn("relay round failed", "err", err, "failures", failures, "retry_in", wait)
		default:
			failures = 0
			switch {
			case rescan:
				// Reading from the start picks up rows whose publish
				// failed and rows an operator redrove.
				after, rescanned = 0, r.now()
			case len(msgs) > 0:
				after = msgs[len(msgs)-1].ID
			}
			switch {
			case full:
				// There is more: go on at once.
			case len(msgs) == 0 && now.Sub(lastRows) >= r.cfg.BusyFor:
				wait = r.cfg.PollInterval
			default:
				// Tickets are flowing: look again soon, so a busy system's
				// commit→ack lag is not the idle poll interval.
				wait = r.cfg.BusyPollInterval
			}
		}
		if len(msgs) > 0 {
			lastRows = now
		}
		if wait > 0 && !sleep(ctx, wait) {
			return nil
		}
	}
}

// Leading reports whether this relay holds the lease: it is the one
// dispatcher of the database that publishes.
func (r *Relay) Leading() bool { return r.leading.Load() }

// publish sends one batch and marks the acknowledged rows published.
func (r *Relay) publish(ctx context.Context, msgs []Message) error {
	results := r.pub.Publish(ctx, msgs)
	failpoint.Hit(failpoint.RelayAfterPublish)
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

// inflight runs up to depth batches at once and keeps their first error.
type inflight struct {
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	first error
}

func newInflight(depth int) *inflight { return &inflight{slots: make(chan struct{}, depth)} }

// start runs fn once a slot is free (or not at all if ctx ends first).
func (f *inflight) start(ctx context.Context, fn func() error) {
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	f.wg.Go(func() {
		defer func() { <-f.slots }()
		if err := fn(); err != nil {
			f.mu.Lock()
			f.first = cmp.Or(f.first, err)
			f.mu.Unlock()
		}
	})
}

// idle reports whether no batch is in flight.
func (f *inflight) idle() bool { return len(f.slots) == 0 }

// err takes the first error of the batches finished so far.
func (f *inflight) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.first
	f.first = nil
	return err
}

// drain waits for every batch in flight and takes the first error.
func (f *inflight) drain() error {
	f.wg.Wait()
	return f.err()
}

// pending reads the next batch of unpublished rows with ids above after.
// Ids grow in commit order (the ledger allocates them under the write
// lock), so a row committed later never has an id below one read before.
func (r *Relay) pending(ctx context.Context, after int64) ([]Message, error) {
	if r.pendingStmt == nil {
		s, err := r.read.PrepareContext(ctx,
			`SELECT id, request_id, subject, payload, created_at, generation FROM outbox
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
		if err := rows.Scan(&m.ID, &m.RequestID, &m.Subject, &m.Payload, &created, &m.Generation); err != nil {
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

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
