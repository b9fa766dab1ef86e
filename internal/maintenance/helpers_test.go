package maintenance_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// env is a real ledger on a temporary file, on a settable clock.
type env struct {
	path  string
	l     *ledger.Ledger
	m     *metrics.Writer
	clock *downstreamtest.Clock
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openEnv(t *testing.T) *env {
	t.Helper()
	m := metrics.NewFront(prometheus.NewRegistry()).Writer
	c := downstreamtest.NewClock(time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC))
	l := fixture.NewLedger(t, fixture.WriterMetrics(m), fixture.Clock(c.Now))
	return &env{path: l.Path, l: l.Ledger, m: m, clock: c}
}

// create accepts a request with id for the target "local".
func (e *env) create(t *testing.T, id string) request.Result {
	t.Helper()
	r := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "local", Title: "Disk full on db-1", Priority: "urgent"}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	res, err := e.l.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// settle writes id's delivery record in state.
func (e *env) settle(t *testing.T, id, state string) {
	t.Helper()
	if err := e.l.RecordDelivery(context.Background(), request.Delivery{RequestID: id, Target: "local", State: state, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
}
