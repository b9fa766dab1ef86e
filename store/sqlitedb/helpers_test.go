package sqlitedb_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ticketrelay/metrics"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// env is one process's view of a ticketrelay database: the DB, its writer
// and the ledger, its first tenant, whose creates the tests write with.
// The tests read through the DB's read pool, which sees only what was
// committed.
type env struct {
	path string
	db   *sqlitedb.DB
	w    *sqlitedb.Writer
	l    *ledger.Ledger
	m    *metrics.Writer
}

func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "tickets.db") }

// openEnv opens path and starts a writer on it; everything is closed at cleanup.
func openEnv(t *testing.T, path string) *env {
	t.Helper()
	m := metrics.NewFront(prometheus.NewRegistry()).Writer
	l := fixture.NewLedger(t, fixture.At(path), fixture.WriterMetrics(m))
	return &env{path: path, db: l.DB, w: l.Writer, m: m, l: l.Ledger}
}

// rows reports the number of rows in requests, tickets and outbox.
func rows(t *testing.T, db *sql.DB) [3]int {
	t.Helper()
	var n [3]int
	for i, table := range []string{"requests", "tickets", "outbox"} {
		n[i] = fixture.Count(t, db, `SELECT count(*) FROM `+table)
	}
	return n
}

func newRequest(id string) ticket.Request {
	r := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "local", Title: "Disk full on db-1", Priority: "urgent"}
	if err := r.Normalize(); err != nil {
		panic(err)
	}
	return r
}

func histogram(t *testing.T, h prometheus.Histogram) (n uint64, sum float64) {
	m := metricValue(t, h).GetHistogram()
	return m.GetSampleCount(), m.GetSampleSum()
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	return metricValue(t, c).GetCounter().GetValue()
}

func testGauge(t *testing.T, g prometheus.Gauge) float64 {
	return metricValue(t, g).GetGauge().GetValue()
}

// metricValue reads c, a single counter, gauge or histogram.
func metricValue(t *testing.T, c prometheus.Metric) *dto.Metric {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// waitFor waits for cond with a deadline (see testkit/testwait).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, timeout, what, cond)
}

// blockWriter parks the writer goroutine inside an operation until the
// returned release is called, so that the next operations queue up and are
// committed together in the following batch.
func blockWriter(t *testing.T, w *sqlitedb.Writer) (release func()) {
	t.Helper()
	started := make(chan struct{})
	unblock := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- w.InTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			close(started)
			select {
			case <-unblock:
				return nil
			case <-time.After(30 * time.Second):
				return errors.New("blocker never released")
			}
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("writer did not start the blocking operation")
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(unblock)
			if err := <-done; err != nil {
				t.Errorf("blocking operation: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}
