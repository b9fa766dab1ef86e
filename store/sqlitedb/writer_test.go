package sqlitedb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"ticketrelay/store/sqlitedb"
)

// insertLease is a small write the writer tests use as an operation.
func insertLease(name string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES (?, 'test', 0)`, name)
		return err
	}
}

func leaseNames(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	rs, err := db.Query(`SELECT name FROM leases`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	names := map[string]bool{}
	for rs.Next() {
		var n string
		if err := rs.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names[n] = true
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestFailedOperationRollsBackOnlyItself(t *testing.T) {
	e := openEnv(t, dbPath(t))
	errBad := errors.New("bad operation")
	release := blockWriter(t, e.w)

	var mu sync.Mutex
	txs := map[string]*sql.Tx{}
	op := func(name string, fail error) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			mu.Lock()
			txs[name] = tx
			mu.Unlock()
			if err := insertLease(name)(ctx, tx); err != nil {
				return err
			}
			return fail
		}
	}
	ops := []struct {
		name string
		fail error
	}{{"good-1", nil}, {"bad", errBad}, {"good-2", nil}, {"good-1", nil} /* duplicate key: SQL error */}
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Go(func() { errs[i] = e.w.InTx(context.Background(), op(o.name, o.fail)) })
	}
	waitFor(t, 10*time.Second, "4 operations queued behind the blocker", func() bool { return e.w.QueuedForTest() == len(ops) })
	release()
	wg.Wait()

	// All four ran in one transaction.
	if len(txs) != 3 {
		t.Fatalf("operations recorded %d distinct names, want 3", len(txs))
	}
	if txs["good-1"] != txs["bad"] || txs["bad"] != txs["good-2"] {
		t.Fatal("the operations did not share one transaction; the test did not exercise a batch")
	}
	goodErrs := 0
	for i, o := range ops {
		switch {
		case o.fail != nil:
			if !errors.Is(errs[i], errBad) {
				t.Errorf("bad op returned %v, want its own error", errs[i])
			}
		case errs[i] == nil:
			goodErrs++
		}
	}
	// Exactly one of the two "good-1" inserts wins; the other hits the primary key.
	if goodErrs != 2 {
		t.Errorf("errors: %v; want nil for good-1 (once) and good-2, a constraint error for the second good-1", errs)
	}
	names := leaseNames(t, e.db.Reader())
	if !names["good-1"] || !names["good-2"] || names["bad"] || len(names) != 2 {
		t.Errorf("committed leases %v, want exactly good-1 and good-2", names)
	}
	batches, ops2 := histogram(t, e.m.BatchSize)
	if batches != 2 || ops2 != 5 {
		t.Errorf("batches %d with %v ops, want 2 (blocker, then the 4 together) with 5", batches, ops2)
	}
	if c := counter(t, e.m.CommitErrors); c != 0 {
		t.Errorf("commit errors = %v; an operation's own error is not a failed commit", c)
	}
}

func TestLoneFailedOperationWritesNothing(t *testing.T) {
	e := openEnv(t, dbPath(t))
	errBad := errors.New("bad operation")
	err := e.w.InTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		if err := insertLease("solo")(ctx, tx); err != nil {
			return err
		}
		return errBad
	})
	if !errors.Is(err, errBad) {
		t.Fatalf("InTx = %v, want the operation's error", err)
	}
	if names := leaseNames(t, e.db.Reader()); len(names) != 0 {
		t.Fatalf("leases %v committed by a failed operation", names)
	}
	// An operation's own error (a conflict, a state check) is not a failed
	// group commit, whether it ran alone or with others.
	if c := counter(t, e.m.CommitErrors); c != 0 {
		t.Errorf("commit errors = %v after an operation (not the commit) failed", c)
	}
	if err := e.w.InTx(context.Background(), insertLease("after")); err != nil {
		t.Fatalf("the writer is not usable after a failed operation: %v", err)
	}
}

func TestWriterCloseDrainsQueuedWork(t *testing.T) {
	e := openEnv(t, dbPath(t))
	release := blockWriter(t, e.w)
	const n = 5
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = e.w.InTx(context.Background(), insertLease(fmt.Sprintf("q%d", i))) })
	}
	waitFor(t, 10*time.Second, "operations queued", func() bool { return e.w.QueuedForTest() == n })

	closed := make(chan struct{})
	go func() { e.w.Close(); close(closed) }()
	waitFor(t, 10*time.Second, "Close to stop accepting work", e.w.ClosedForTest)
	if err := e.w.InTx(context.Background(), insertLease("late")); !errors.Is(err, sqlitedb.ErrWriterClosed) {
		t.Fatalf("InTx after Close = %v, want ErrWriterClosed", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while work was still queued")
	default:
	}
	release()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the queue drained")
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("queued operations failed: %v", err)
	}
	names := leaseNames(t, e.db.Reader())
	if len(names) != n || names["late"] {
		t.Fatalf("committed %v, want q0..q%d and not late", names, n-1)
	}
	if err := e.w.InTx(context.Background(), insertLease("later")); !errors.Is(err, sqlitedb.ErrWriterClosed) {
		t.Fatalf("InTx after Close returned = %v, want ErrWriterClosed", err)
	}
	e.w.Close() // idempotent
}

func TestCancelledCallerStillCommits(t *testing.T) {
	e := openEnv(t, dbPath(t))
	release := blockWriter(t, e.w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.l.Create(ctx, newRequest("req-cancelled"))
		done <- err
	}()
	waitFor(t, 10*time.Second, "the Create to be queued", func() bool { return e.w.QueuedForTest() == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Create = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Create did not return after its context was cancelled")
	}
	release()

	// The retry finds the write that happened after the caller left.
	res, err := e.l.Create(context.Background(), newRequest("req-cancelled"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed {
		t.Fatalf("retry after a cancelled call = %+v, want a replay of the committed write", res)
	}
	if got := rows(t, e.db.Reader()); got != [3]int{1, 1, 1} {
		t.Fatalf("rows = %v, want [1 1 1]", got)
	}
}

// InTxThen returns once the operation is queued, and its callback hears the
// operation's own result after the commit: nil once the write is durable
// (visible to another connection), the operation's error otherwise. After
// Close it is refused and the callback never runs.
func TestInTxThen(t *testing.T) {
	e := openEnv(t, dbPath(t))
	release := blockWriter(t, e.w)
	errBad := errors.New("bad operation")
	db := e.db.Reader()
	results := make(chan string, 2)
	then := func(name string) func(error) {
		return func(err error) {
			// On the writer goroutine: no t helpers here.
			var n int
			qerr := db.QueryRow(`SELECT count(*) FROM leases WHERE name = ?`, name).Scan(&n)
			results <- fmt.Sprintf("%s: err=%v committed=%v (%v)", name, err, n == 1, qerr)
		}
	}
	if err := e.w.InTxThen(context.Background(), insertLease("good"), then("good")); err != nil {
		t.Fatal(err)
	}
	bad := func(ctx context.Context, tx *sql.Tx) error {
		if err := insertLease("bad")(ctx, tx); err != nil {
			return err
		}
		return errBad
	}
	if err := e.w.InTxThen(context.Background(), bad, then("bad")); err != nil {
		t.Fatal(err)
	}
	if n := e.w.QueuedForTest(); n != 2 {
		t.Fatalf("%d operations queued, want both InTxThen calls to return while the writer is busy", n)
	}
	select {
	case r := <-results:
		t.Fatalf("callback ran before the commit: %s", r)
	default:
	}
	release()
	got := map[string]bool{}
	for range 2 {
		select {
		case r := <-results:
			got[r] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("callbacks heard so far: %v", got)
		}
	}
	want := []string{"good: err=<nil> committed=true (<nil>)", fmt.Sprintf("bad: err=%v committed=false (<nil>)", errBad)}
	for _, w := range want {
		if !got[w] {
			t.Errorf("callbacks heard %v, want %q", got, w)
		}
	}
	e.w.Close()
	called := false
	if err := e.w.InTxThen(context.Background(), insertLease("late"), func(error) { called = true }); !errors.Is(err, sqlitedb.ErrWriterClosed) || called {
		t.Fatalf("InTxThen after Close = %v (callback ran: %v), want ErrWriterClosed and no callback", err, called)
	}
}
