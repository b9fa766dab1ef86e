package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"ticketrelay/metrics"
	"ticketrelay/tracing"
)

// ErrWriterClosed is returned for work submitted after Close.
var ErrWriterClosed = errors.New("sqlitedb: writer closed")

// MaxBatch bounds how many operations share one transaction.
const MaxBatch = 256

type job struct {
	span trace.Span // the submitter's: its commit's span links to it
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan error  // InTx's caller waits here,
	then func(error) // or InTxThen's callback hears the result
}

func (j job) finish(err error) {
	if j.then != nil {
		j.then(err)
		return
	}
	j.done <- err
}

// Writer is the single writer of a process. Operations submitted from many
// goroutines are batched into one IMMEDIATE transaction. If one of them
// fails, the batch is rolled back and run again with each operation in its
// own SAVEPOINT, so one operation's error undoes only its own writes.
// Every caller is answered after the COMMIT is durable.
type Writer struct {
	db      *sql.DB
	log     *slog.Logger
	metrics *metrics.Writer
	jobs    chan job
	mu      sync.RWMutex // guards closed against sends on jobs
	closed  bool
	done    chan struct{}
	stmts   stmtCache // used on the writer goroutine only
	ckpt    *checkpointer
	// committed runs after each batch whose transaction did not fail,
	// before its callers are answered (AfterCommit). nil: nothing.
	committed func()
}

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// AfterCommit has fn run on the writer goroutine after every batch whose
// transaction did not fail, before its callers are answered; fn must not
// block. The front wakes the relay with it (outbox.Waker): what the
// transaction wrote is visible to readers by then.
func AfterCommit(fn func()) WriterOption {
	return func(w *Writer) { w.committed = fn }
}

// NewWriter starts the writer goroutine on db's write pool, and its
// checkpoints on their own connection (checkpoint.go).
func NewWriter(db *DB, log *slog.Logger, m *metrics.Writer, opts ...WriterOption) *Writer {
	w := &Writer{
		db:      db.write,
		log:     log,
		metrics: m,
		jobs:    make(chan job, MaxBatch),
		done:    make(chan struct{}),
		ckpt:    startCheckpointer(db.ckpt, log, m),
	}
	for _, o := range opts {
		o(w)
	}
	go w.loop()
	return w
}

// InTx runs fn inside the next group-commit transaction and returns after
// that transaction is durable. fn must be quick and must not block: it runs
// on the writer goroutine. fn may run twice, the first time in a transaction
// that is rolled back (when another operation of its batch fails; see
// runBatch): it must act only through tx, and set what it returns on each
// run. Once submitted, fn runs even if ctx is cancelled while waiting; the
// caller just stops waiting for the answer.
func (w *Writer) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	j := job{span: tracing.Caller(ctx), fn: fn, done: make(chan error, 1)}
	if err := w.submit(ctx, j); err != nil {
		return err
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// InTxThen is InTx without the wait: it returns once fn is queued, or with
// the error that kept it out (then is not called). Once queued, then hears
// what InTx would have returned, after the transaction is durable or has
// failed. then runs on the writer goroutine: it must be quick and must not
// submit work to w.
func (w *Writer) InTxThen(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error, then func(error)) error {
	return w.submit(ctx, job{span: tracing.Caller(ctx), fn: fn, then: then})
}

func (w *Writer) submit(ctx context.Context, j job) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrWriterClosed
	}
	select {
	case w.jobs <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting work, finishes what was submitted and returns.
func (w *Writer) Close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.mu.Unlock()
	<-w.done
	w.ckpt.close()
}

func (w *Writer) loop() {
	defer close(w.done)
	batch := make([]job, 0, MaxBatch)
	for first := range w.jobs {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < MaxBatch {
			select {
			case j, ok := <-w.jobs:
				if !ok {
					break fill
				}
				batch = append(batch, j)
			default:
				break fill
			}
		}
		w.commit(batch)
		w.stmts.prepareWanted(context.Background(), w.db, w.log)
	}
	w.stmts.close()
}

// commit runs one batch. The context is not any caller's: a submitted
// operation completes even if its caller has gone away.
func (w *Writer) commit(batch []job) {
	ctx := context.Background()
	start := time.Now()
	errs := make([]error, len(batch))
	span := tracing.StartCommit(len(batch), func(i int) trace.Span { return batch[i].span })
	err := w.runBatch(ctx, batch, errs)
	tracing.EndCommit(span, err)
	w.metrics.CommitDuration.Observe(time.Since(start).Seconds())
	w.metrics.BatchSize.Observe(float64(len(batch)))
	if err != nil {
		w.metrics.CommitErrors.Inc()
		w.log.Error("group commit failed", "ops", len(batch), "err", err)
	} else if w.committed != nil {
		w.committed()
	}
	for i, j := range batch {
		if err != nil {
			j.finish(err)
		} else {
			j.finish(errs[i])
		}
	}
}

// runBatch returns an error only when the transaction itself failed; an
// operation's own error goes to errs and rolls back only that operation.
//
// Most batches succeed whole, so a batch first runs without savepoints: a
// savepoint copies every page an operation touches that the batch had already
// dirtied into a sub-journal, CPU that a batch which succeeds whole does not
// need to spend (decision 0069 has the measurements). If an operation fails,
// that transaction is rolled back and the batch runs again, each operation
// inside its own savepoint. A batch of one needs no savepoint: its error rolls
// back the transaction.
func (w *Writer) runBatch(ctx context.Context, batch []job, errs []error) error {
	failed, err := w.runTx(ctx, batch, errs, false)
	if err != nil || !failed || len(batch) == 1 {
		return err
	}
	clear(errs)
	_, err = w.runTx(ctx, batch, errs, true)
	return err
}

// runTx runs batch in one transaction. Without savepoints it stops at the
// first operation that fails and rolls everything back (failed); with them,
// a failed operation is rolled back to its savepoint and the others commit.
func (w *Writer) runTx(ctx context.Context, batch []job, errs []error, savepoints bool) (failed bool, err error) {
	tx, err := beginImmediate(ctx, w.db)
	if err != nil {
		return false, fmt.Errorf("sqlitedb: begin: %w", err)
	}
	defer tx.Rollback()
	for i, j := range batch {
		if savepoints {
			if _, err := w.stmts.exec(ctx, tx, "SAVEPOINT op"); err != nil {
				return false, fmt.Errorf("sqlitedb: savepoint: %w", err)
			}
		}
		if errs[i] = j.fn(ctx, tx); errs[i] != nil {
			if !savepoints {
				return true, nil // deferred rollback
			}
			if _, err := w.stmts.exec(ctx, tx, "ROLLBACK TO op"); err != nil {
				return false, fmt.Errorf("sqlitedb: rollback to savepoint: %w", err)
			}
		}
		if savepoints {
			if _, err := w.stmts.exec(ctx, tx, "RELEASE op"); err != nil {
				return false, fmt.Errorf("sqlitedb: release savepoint: %w", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("sqlitedb: commit: %w", err)
	}
	return false, nil
}

// LockWait bounds how long the writer waits for the other process to
// release the database's write lock.
const LockWait = 10 * time.Second

// beginImmediate starts an IMMEDIATE transaction, retrying while the other
// process holds the write lock. Its pauses start at 50µs and grow to 1ms
// (with jitter), so the lock changes hands within a fraction of a typical
// transaction instead of after SQLite's 1…100 ms busy-handler sleeps.
func beginImmediate(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
	deadline := time.Now().Add(LockWait)
	pause := 50 * time.Microsecond
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return tx, err
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, time.Millisecond)
	}
}

// isBusy reports whether err is SQLITE_BUSY (or one of its extended codes).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
