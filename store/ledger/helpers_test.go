package ledger_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"ticketrelay/front/advice"
	"ticketrelay/store"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testclock"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	_ "modernc.org/sqlite"

	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/store/ledger"
	"ticketrelay/ticket"
)

func newClock() *testclock.Clock {
	return testclock.New(time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC))
}

// env is one process's view of a database: DB, writer, ledger, metrics.
type env struct {
	path  string
	db    *sqlitedb.DB
	w     *sqlitedb.Writer
	l     *ledger.Ledger
	m     *metrics.Writer
	clock *testclock.Clock
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "tickets.db") }

// openEnv opens path and starts a writer on it; everything is closed at cleanup.
func openEnv(t *testing.T, path string) *env {
	t.Helper()
	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return wrapEnv(t, path, db)
}

func wrapEnv(t *testing.T, path string, db *sqlitedb.DB) *env {
	t.Helper()
	m := metrics.NewFront(prometheus.NewRegistry()).Writer
	w := sqlitedb.NewWriter(db, discard(), m)
	c := newClock()
	e := &env{path: path, db: db, w: w, m: m, clock: c, l: ledger.New(db, w, c.Now)}
	t.Cleanup(func() {
		w.Close()
		if err := db.Close(); err != nil {
			t.Errorf("close db: %v", err)
		}
	})
	return e
}

// rows reports the number of rows in requests, tickets and outbox.
func rows(t *testing.T, db *sql.DB) [3]int {
	t.Helper()
	return [3]int{
		fixture.Count(t, db, `SELECT count(*) FROM requests`),
		fixture.Count(t, db, `SELECT count(*) FROM tickets`),
		fixture.Count(t, db, `SELECT count(*) FROM outbox`),
	}
}

func newRequest(id string) ticket.Request {
	r := ticket.Request{
		RequestID: id,
		Tool:      "create_ticket",
		Target:    "local",
		Title:     "Disk full on db-1",
		Body:      "df shows 100%\nsince 09:00",
		Priority:  "urgent",
		Labels:    []string{"ops", "disk", "ops"},
	}
	if err := r.Normalize(); err != nil {
		panic(err)
	}
	return r
}

func histogram(t *testing.T, h prometheus.Histogram) (n uint64, sum float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// find is Find with the detail the front writes for the agent
// (advice.Advise): the words are the front's, the facts they are
// written from the ledger's.
func (e *env) find(ctx context.Context, subject, requestID string) (mcptools.RequestStatus, error) {
	st, err := e.l.Find(ctx, subject, requestID)
	return mcptools.RequestStatus{Report: st, Detail: advice.Advise(st)}, err
}
