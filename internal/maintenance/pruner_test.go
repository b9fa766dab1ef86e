package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"ticketrelay/internal/archetype"
	"ticketrelay/internal/maintenance"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
)

// TestLedgerRequestsGaugeFollowsAcceptedRequests: ledger_requests counts
// a request as soon as it is accepted, not only after the next pruning
// round: a dispatcher starts on an empty ledger, and a gauge set only by
// the round at its start and then once a minute read 0 while the ledger
// held the requests accepted since.
func TestLedgerRequestsGaugeFollowsAcceptedRequests(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t)
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	p, err := maintenance.NewPruner(archetype.Archetype{Logger: discard(), Now: e.clock.Now, Metrics: m}, maintenance.RetentionConfig{Keep: 24 * time.Hour}, e.l)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunOnce(ctx); err != nil { // the round at the dispatcher's start
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.LedgerRequests); got != 0 {
		t.Fatalf("ledger_requests %v on an empty ledger, want 0", got)
	}
	for i := range 3 {
		e.create(t, fmt.Sprintf("after-start-%d", i))
		if got := testutil.ToFloat64(m.LedgerRequests); got != float64(i+1) {
			t.Fatalf("ledger_requests %v with %d requests accepted since the last pruning round, want %d", got, i+1, i+1)
		}
	}
}

func TestRetentionValidation(t *testing.T) {
	for _, c := range []maintenance.RetentionConfig{{Keep: 29 * time.Minute}, {Keep: time.Minute}} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("retention %s accepted; it must be refused below the 30m client retry horizon", c.Keep)
		}
	}
	if err := (maintenance.RetentionConfig{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("default retention refused: %v", err)
	}
	if got := (maintenance.RetentionConfig{}).WithDefaults().Keep; got != 24*time.Hour {
		t.Fatalf("default retention %s, want 24h", got)
	}
}

// Only settled (delivered, failed) requests older than the retention go;
// queued, in-flight, retrying and uncertain ones stay, whatever their age.
func TestPruneRemovesOnlyExpiredSettledRequests(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t)
	db := fixture.Raw(t, e.path)
	states := map[string]string{
		"old-delivered": string(request.StatusDelivered),
		"old-failed":    string(request.StatusFailed),
		"old-uncertain": string(request.StatusUncertain),
		"old-retrying":  string(request.StatusRetrying),
		"old-inflight":  request.DeliveryAttempting,
		"old-queued":    "",
	}
	for id, state := range states {
		e.create(t, id)
		if state != "" {
			e.settle(t, id, state)
		}
	}
	rowIDs := map[string]int{} // a delivery record is keyed by its ledger row's id
	for id := range states {
		rowIDs[id] = fixture.Count(t, db, `SELECT id FROM requests WHERE request_id = ?`, id)
	}
	e.clock.Add(25 * time.Hour)
	e.create(t, "young-delivered")
	e.settle(t, "young-delivered", string(request.StatusDelivered))

	m := metrics.NewDispatcher(prometheus.NewRegistry())
	p, err := maintenance.NewPruner(archetype.Archetype{Logger: discard(), Now: e.clock.Now, Metrics: m}, maintenance.RetentionConfig{Keep: 24 * time.Hour, Batch: 1}, e.l)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Pruned); got != 2 {
		t.Fatalf("pruned %v requests, want 2 (old-delivered, old-failed)", got)
	}
	for id := range states {
		want := 1
		if id == "old-delivered" || id == "old-failed" {
			want = 0
		}
		for _, table := range []string{"requests", "tickets", "outbox"} {
			if got := fixture.Count(t, db, `SELECT count(*) FROM `+table+` WHERE request_id = ?`, id); got != want {
				t.Errorf("%s: %d rows in %s, want %d", id, got, table, want)
			}
		}
		if states[id] == "" {
			continue
		}
		if got := fixture.Count(t, db, `SELECT count(*) FROM deliveries WHERE id = ?`, rowIDs[id]); got != want {
			t.Errorf("%s: %d delivery records, want %d", id, got, want)
		}
	}
	if got := fixture.Count(t, db, `SELECT count(*) FROM requests WHERE request_id = 'young-delivered'`); got != 1 {
		t.Fatal("a request younger than the retention was pruned")
	}
	gauge := testutil.ToFloat64(m.LedgerRequests)
	if gauge != 5 {
		t.Fatalf("ledger_requests gauge %v, want 5", gauge)
	}

	// A pruned request id is a new request: it is accepted again, not replayed.
	if res := e.create(t, "old-delivered"); res.Replayed {
		t.Fatalf("reused expired id: %+v; want a new, not replayed, request", res)
	}
}

// Pruning works in batches: many expired rows take several transactions,
// and every one of them is removed.
func TestPruneInBatches(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t)
	for i := range 23 {
		id := fmt.Sprintf("r-%02d", i)
		e.create(t, id)
		e.settle(t, id, string(request.StatusDelivered))
	}
	e.clock.Add(time.Hour)
	before := batches(t, e.m.BatchSize)
	p, err := maintenance.NewPruner(archetype.Archetype{Logger: discard(), Now: e.clock.Now, Metrics: metrics.NewDispatcher(prometheus.NewRegistry())},
		maintenance.RetentionConfig{Keep: 30 * time.Minute, Batch: 5}, e.l)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fixture.Count(t, fixture.Raw(t, e.path), `SELECT count(*) FROM requests`); got != 0 {
		t.Fatalf("%d requests left after pruning", got)
	}
	if txs := batches(t, e.m.BatchSize) - before; txs < 5 {
		t.Fatalf("pruning 23 rows in batches of 5 took %d transactions, want at least 5", txs)
	}
}

// batches is how many transactions the writer committed (its batch size
// histogram's count).
func batches(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
