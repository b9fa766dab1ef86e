package trail

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

	"github.com/prometheus/client_golang/prometheus"
)

// ErrQueueFull is Writer.Record's error when its queue is full: the entry
// is counted as dropped, and the trail gets a note saying how many.
var ErrQueueFull = errors.New("trail: queue full, entry dropped")

// ErrClosed is Record's error after Close.
var ErrClosed = errors.New("trail: writer closed")

// WriterConfig tunes a Writer.
type WriterConfig struct {
	// Queue bounds the entries waiting to be written (beyond it, Record
	// drops). Default 65536: a few seconds of a flood; the memory held
	// follows the entries waiting, not the bound.
	Queue int
	// MaxBatch bounds the entries one transaction writes. Default 1024.
	MaxBatch int
	// Linger is how long the writer gathers entries after the first of a
	// batch, so that it takes the database's write lock a few dozen times
	// a second at most, whatever the rate of calls. Default 25ms.
	Linger time.Duration
	// Commit, if set, is the ledger's writer: each batch joins its next
	// group-commit transaction rather than taking the database's write
	// lock in one of its own (decision 0145).
	Commit GroupCommit
}

// GroupCommit runs fn in a shared write transaction and tells then how it
// ended, without waiting (sqlitedb.Writer.InTxThen).
type GroupCommit interface {
	InTxThen(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, then func(error)) error
}

func (c WriterConfig) withDefaults() WriterConfig {
	c.Queue = cmp.Or(c.Queue, 65536)
	c.MaxBatch = cmp.Or(c.MaxBatch, 1024)
	c.Linger = cmp.Or(c.Linger, 25*time.Millisecond)
	return c
}

// Writer records entries asynchronously: Record queues the entry and
// returns at once; one goroutine writes what is queued in batches, in a
// transaction of its own beside the ledger's writer, so that a call's
// answer never waits for its entry, and a flood of refused calls cannot
// slow accepted ones. What is queued when the process dies is lost (at
// most Linger's worth plus one batch; decision 0145); Close writes it.
type Writer struct {
	store  *Store
	cfg    WriterConfig
	log    *slog.Logger
	now    func() time.Time
	wake   chan struct{} // a first entry is pending
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once

	// pending grows with what waits and no more: a queue preallocated to
	// its bound would be scanned whole by every garbage collection.
	mu      sync.Mutex
	pending []Entry
	dropped int64 // since the last note

	entries   *prometheus.CounterVec
	droppedC  prometheus.Counter
	failures  prometheus.Counter
	lastWrite prometheus.Gauge
}

// NewWriter starts a Writer on store; reg receives its metrics.
func NewWriter(store *Store, cfg WriterConfig, log *slog.Logger, now func() time.Time, reg prometheus.Registerer) *Writer {
	cfg = cfg.withDefaults()
	w := &Writer{store: store, cfg: cfg, log: log, now: now, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ticketrelay_trail_entries_total",
			Help: "Audit trail entries written, by kind and outcome."}, []string{"kind", "outcome"}),
		droppedC: prometheus.NewCounter(prometheus.CounterOpts{Name: "ticketrelay_trail_dropped_total",
			Help: "Audit trail entries dropped because the writer's queue was full (the trail notes each gap)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "ticketrelay_trail_write_failures_total",
			Help: "Batches of audit trail entries the writer could not store after retrying (their entries are lost)."}),
		lastWrite: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ticketrelay_trail_last_write_timestamp_seconds",
			Help: "When the audit trail writer last stored a batch."}),
	}
	reg.MustRegister(w.entries, w.droppedC, w.failures, w.lastWrite)
	go w.run()
	return w
}

var _ Recorder = (*Writer)(nil)

// Record queues e. It never blocks: with the queue full, e is dropped
// and counted (ErrQueueFull).
func (w *Writer) Record(_ context.Context, e Entry) error {
	if w.closed.Load() {
		return ErrClosed
	}
	if err := e.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	if len(w.pending) >= w.cfg.Queue {
		w.dropped++
		w.mu.Unlock()
		w.droppedC.Inc()
		return ErrQueueFull
	}
	w.pending = append(w.pending, e)
	first := len(w.pending) == 1
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Close writes what is queued and stops the writer.
func (w *Writer) Close() error {
	w.once.Do(func() {
		w.closed.Store(true)
		close(w.stop)
	})
	<-w.done
	return nil
}

func (w *Writer) run() {
	defer close(w.done)
	linger := time.NewTimer(w.cfg.Linger)
	linger.Stop()
	var spare []Entry
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			w.flushPending(spare)
			return
		}
		linger.Reset(w.cfg.Linger)
		select {
		case <-linger.C:
		case <-w.stop:
			linger.Stop()
		}
		spare = w.flushPending(spare)
	}
}

// flushPending writes what is pending, MaxBatch entries a transaction, and
// returns a buffer for the next round (spare, emptied, unless it grew far
// beyond a batch in a flood).
func (w *Writer) flushPending(spare []Entry) []Entry {
	w.mu.Lock()
	batch := w.pending
	w.pending = spare[:0]
	dropped := w.dropped
	w.dropped = 0
	w.mu.Unlock()
	for rest := batch; len(rest) > 0 || dropped > 0; dropped = 0 {
		n := min(len(rest), w.cfg.MaxBatch)
		w.flush(rest[:n:n], dropped)
		rest = rest[n:]
	}
	if cap(batch) > 4*w.cfg.MaxBatch {
		return nil
	}
	clear(batch) // let the strings go
	return batch[:0]
}

// append stores batch: in a transaction of the ledger's group commit if
// the writer has one, else in one of its own.
func (w *Writer) append(batch []Entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w.cfg.Commit == nil {
		_, err := w.store.Append(ctx, batch)
		return err
	}
	if err := clean(batch); err != nil {
		return err
	}
	rows, err := encode(batch)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	err = w.cfg.Commit.InTxThen(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := insert(ctx, tx, rows)
		return err
	}, func(err error) { done <- err })
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush writes batch, with a note of the entries dropped since the last
// one, retrying a failed write a few times.
func (w *Writer) flush(batch []Entry, dropped int64) {
	if n := dropped; n > 0 {
		batch = append(batch, Entry{Time: w.now(), Kind: KindTrail, Outcome: Dropped,
			Reason: fmt.Sprintf("%d entries not recorded: the trail's queue was full", n)})
	}
	if len(batch) == 0 {
		return
	}
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		err = w.append(batch)
		if err == nil {
			for _, e := range batch {
				w.entries.WithLabelValues(e.Kind, e.Outcome).Inc()
			}
			w.lastWrite.Set(float64(w.now().UnixNano()) / 1e9)
			return
		}
	}
	w.failures.Inc()
	w.log.Error("audit trail: entries lost: could not store them", "entries", len(batch), "err", err)
}
