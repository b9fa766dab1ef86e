package trail

import (
	"cmp"
	"context"
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
	// Queue bounds the entries waiting to be written. Default 65536
	// (about 30 MB at the bounds of an entry's fields, a few MB in practice).
	Queue int
	// MaxBatch bounds the entries one transaction writes. Default 1024.
	MaxBatch int
	// Linger is how long the writer gathers entries after the first of a
	// batch, so that it takes the database's write lock a few dozen times
	// a second at most, whatever the rate of calls. Default 25ms.
	Linger time.Duration
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
	q      chan Entry
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once

	dropped   atomic.Int64 // since the last note
	entries   *prometheus.CounterVec
	droppedC  prometheus.Counter
	failures  prometheus.Counter
	lastWrite prometheus.Gauge
}

// NewWriter starts a Writer on store; reg receives its metrics.
func NewWriter(store *Store, cfg WriterConfig, log *slog.Logger, now func() time.Time, reg prometheus.Registerer) *Writer {
	cfg = cfg.withDefaults()
	w := &Writer{store: store, cfg: cfg, log: log, now: now, q: make(chan Entry, cfg.Queue),
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
	select {
	case w.q <- e:
		return nil
	default:
		w.dropped.Add(1)
		w.droppedC.Inc()
		return ErrQueueFull
	}
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
	batch := make([]Entry, 0, w.cfg.MaxBatch)
	linger := time.NewTimer(w.cfg.Linger)
	linger.Stop()
	for {
		select {
		case e := <-w.q:
			batch = append(batch[:0], e)
		case <-w.stop:
			w.drain(batch[:0])
			return
		}
		linger.Reset(w.cfg.Linger)
		select {
		case <-linger.C:
		case <-w.stop:
			linger.Stop()
		}
		batch = w.take(batch)
		w.flush(batch)
	}
}

// take adds to batch what is queued, up to MaxBatch.
func (w *Writer) take(batch []Entry) []Entry {
	for len(batch) < w.cfg.MaxBatch {
		select {
		case e := <-w.q:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// drain writes everything still queued once Close was called.
func (w *Writer) drain(batch []Entry) {
	for {
		batch = w.take(batch[:0])
		if len(batch) == 0 && w.dropped.Load() == 0 {
			return
		}
		w.flush(batch)
		if len(batch) == 0 {
			return
		}
	}
}

// flush writes batch, with a note of the entries dropped since the last
// one, retrying a failed write a few times.
func (w *Writer) flush(batch []Entry) {
	if n := w.dropped.Swap(0); n > 0 {
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = w.store.Append(ctx, batch)
		cancel()
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
