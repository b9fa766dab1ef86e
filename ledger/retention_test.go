package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/ledger"
	"ticketrelay/metrics"
)

func settle(t *testing.T, e *env, id, state string) {
	t.Helper()
	if err := e.l.RecordDelivery(context.Background(), ledger.Delivery{RequestID: id, Target: "local", State: state, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerRequestsGaugeFollowsAcceptedRequests: ledger_requests counts
// a request as soon as it is accepted, not only after the next pruning
// round: a dispatcher starts on an empty ledger, and the gauge, set only
// by the round at its start and then once a minute, read 0 while the
// ledger held the requests accepted since.
func TestLedgerRequestsGaugeFollowsAcceptedRequests(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	p, err := ledger.NewPruner(ledger.RetentionConfig{Keep: 24 * time.Hour}, e.l, discard(), m)
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
		if _, err := e.l.Create(ctx, request(fmt.Sprintf("after-start-%d", i))); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(m.LedgerRequests); got != float64(i+1) {
			t.Fatalf("ledger_requests %v with %d requests accepted since the last pruning round, want %d", got, i+1, i+1)
		}
	}
}

func TestRetentionValidation(t *testing.T) {
	for _, c := range []ledger.RetentionConfig{{Keep: 29 * time.Minute}, {Keep: time.Minute}} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("retention %s accepted; it must be refused below the 30m client retry horizon", c.Keep)
		}
	}
	if err := (ledger.RetentionConfig{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("default retention refused: %v", err)
	}
	if got := (ledger.RetentionConfig{}).WithDefaults().Keep; got != 24*time.Hour {
		t.Fatalf("default retention %s, want 24h", got)
	}
}

// Only settled (delivered, failed) requests older than the retention go;
// queued, in-flight, retrying and uncertain ones stay, whatever their age.
func TestPruneRemovesOnlyExpiredSettledRequests(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	db := raw(t, e.path)
	states := map[string]string{
		"old-delivered": string(ledger.StatusDelivered),
		"old-failed":    string(ledger.StatusFailed),
		"old-uncertain": string(ledger.StatusUncertain),
		"old-retrying":  string(ledger.StatusRetrying),
		"old-inflight":  ledger.DeliveryAttempting,
		"old-queued":    "",
	}
	for id, state := range states {
		if _, err := e.l.Create(ctx, request(id)); err != nil {
			t.Fatal(err)
		}
		if state != "" {
			settle(t, e, id, state)
		}
	}
	rowIDs := map[string]int{} // a delivery record is keyed by its ledger row's id
	for id := range states {
		rowIDs[id] = count(t, db, `SELECT id FROM requests WHERE request_id = ?`, id)
	}
	e.clock.Add(25 * time.Hour)
	if _, err := e.l.Create(ctx, request("young-delivered")); err != nil {
		t.Fatal(err)
	}
	settle(t, e, "young-delivered", string(ledger.StatusDelivered))

	m := metrics.NewDispatcher(prometheus.NewRegistry())
	p, err := ledger.NewPruner(ledger.RetentionConfig{Keep: 24 * time.Hour, Batch: 1}, e.l, discard(), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, m.Pruned); got != 2 {
		t.Fatalf("pruned %v requests, want 2 (old-delivered, old-failed)", got)
	}
	for id := range states {
		want := 1
		if id == "old-delivered" || id == "old-failed" {
			want = 0
		}
		for _, table := range []string{"requests", "tickets", "outbox"} {
			if got := count(t, db, `SELECT count(*) FROM `+table+` WHERE request_id = ?`, id); got != want {
				t.Errorf("%s: %d rows in %s, want %d", id, got, table, want)
			}
		}
		if states[id] == "" {
			continue
		}
		if got := count(t, db, `SELECT count(*) FROM deliveries WHERE id = ?`, rowIDs[id]); got != want {
			t.Errorf("%s: %d delivery records, want %d", id, got, want)
		}
	}
	if got := count(t, db, `SELECT count(*) FROM requests WHERE request_id = 'young-delivered'`); got != 1 {
		t.Fatal("a request younger than the retention was pruned")
	}
	gauge := testutil.ToFloat64(m.LedgerRequests)
	if gauge != 5 {
		t.Fatalf("ledger_requests gauge %v, want 5", gauge)
	}

	// A pruned request id is a new request: it is accepted again, not replayed.
	res, err := e.l.Create(ctx, request("old-delivered"))
	if err != nil || res.Replayed {
		t.Fatalf("reused expired id: %+v, %v; want a new, not replayed, request", res, err)
	}
}

// Pruning works in batches: many expired rows take several transactions,
// and every one of them is removed.
func TestPruneInBatches(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	for i := range 23 {
		id := fmt.Sprintf("r-%02d", i)
		if _, err := e.l.Create(ctx, request(id)); err != nil {
			t.Fatal(err)
		}
		settle(t, e, id, string(ledger.StatusDelivered))
	}
	e.clock.Add(time.Hour)
	before, _ := histogram(t, e.m.BatchSize)
	p, err := ledger.NewPruner(ledger.RetentionConfig{Keep: 30 * time.Minute, Batch: 5}, e.l, discard(), metrics.NewDispatcher(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(t, raw(t, e.path), `SELECT count(*) FROM requests`); got != 0 {
		t.Fatalf("%d requests left after pruning", got)
	}
	after, _ := histogram(t, e.m.BatchSize)
	if txs := after - before; txs < 5 {
		t.Fatalf("pruning 23 rows in batches of 5 took %d transactions, want at least 5", txs)
	}
}

func TestRedriveAndResolve(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	db := raw(t, e.path)
	for _, id := range []string{"failed-1", "delivered-1", "uncertain-1"} {
		if _, err := e.l.Create(ctx, request(id)); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, e, "failed-1", string(ledger.StatusFailed))
	settle(t, e, "delivered-1", string(ledger.StatusDelivered))
	settle(t, e, "uncertain-1", string(ledger.StatusUncertain))
	if _, err := db.Exec(`UPDATE outbox SET published_at = 1`); err != nil {
		t.Fatal(err)
	}

	if err := e.l.Redrive(ctx, "failed-1"); err != nil {
		t.Fatal(err)
	}
	st, err := e.l.Find(ctx, "", "failed-1")
	if err != nil || st.Status != ledger.StatusRetrying || st.Attempts != 0 {
		t.Fatalf("after redrive: %+v, %v; want retrying with 0 attempts", st, err)
	}
	if got := count(t, db, `SELECT count(*) FROM outbox WHERE request_id = 'failed-1' AND published_at IS NULL AND generation = 1`); got != 1 {
		t.Fatal("redrive did not queue the message again under generation 1")
	}
	for _, id := range []string{"delivered-1", "uncertain-1", "failed-1"} {
		if err := e.l.Redrive(ctx, id); !errors.Is(err, ledger.ErrState) {
			t.Errorf("Redrive(%s) = %v, want ErrState", id, err)
		}
	}
	// A request the ledger never accepted is no such request; one accepted
	// and not yet tried is on its way.
	if err := e.l.Redrive(ctx, "never-seen"); !errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrState) {
		t.Errorf("Redrive(never-seen) = %v, want ErrNotFound", err)
	}
	if _, err := e.l.Create(ctx, request("queued-1")); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Redrive(ctx, "queued-1"); !errors.Is(err, ledger.ErrState) || !strings.Contains(err.Error(), "on its way") {
		t.Errorf("Redrive(queued-1) = %v, want ErrState: still on its way", err)
	}
	if err := e.l.Resolve(ctx, "delivered-1", true, "X-1"); !errors.Is(err, ledger.ErrState) {
		t.Errorf("Resolve of a delivered request = %v, want ErrState", err)
	}
	if err := e.l.Resolve(ctx, "uncertain-1", true, "ZD-42"); err != nil {
		t.Fatal(err)
	}
	st, err = e.l.Find(ctx, "", "uncertain-1")
	if err != nil || st.Status != ledger.StatusDelivered || st.ExternalID != "ZD-42" {
		t.Fatalf("after resolve: %+v, %v", st, err)
	}
}

// The prune walks requests by age and stops at the cutoff: it must not read
// every settled delivery record and sort them (a full scan inside the write
// transaction, growing with the ledger).
func TestPruneWalksRequestsByAge(t *testing.T) {
	e := openEnv(t, dbPath(t))
	rows, err := raw(t, e.path).Query(`EXPLAIN QUERY PLAN `+ledger.PruneQueryForTest, 0, 1, "delivered", "failed", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	joined := strings.Join(plan, "; ")
	if !strings.Contains(joined, "INDEX requests_created") || strings.Contains(joined, "TEMP B-TREE") ||
		strings.Contains(joined, "deliveries_state") {
		t.Fatalf("prune plan %q: want requests walked by requests_created, no sort, no deliveries_state scan", joined)
	}
}

// A run resumes each batch where the previous one stopped: requests before
// that position were pruned or never settle, and are not walked again.
func TestPruneFromResumes(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	var created []time.Time
	for i := range 3 {
		id := fmt.Sprintf("req-%d", i)
		if _, err := e.l.Create(ctx, request(id)); err != nil {
			t.Fatal(err)
		}
		created = append(created, e.clock.Now())
		if err := e.l.RecordDelivery(ctx, ledger.Delivery{RequestID: id, Target: "local", State: string(ledger.StatusDelivered), Attempts: 1}); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Minute)
	}
	cutoff := e.clock.Now()
	n, next, err := e.l.PruneFrom(ctx, time.Time{}, cutoff, 2)
	if err != nil || n != 2 || !next.Equal(created[1]) {
		t.Fatalf("first batch: %d pruned, next %v, %v; want 2 and the second request's time %v", n, next, err, created[1])
	}
	// From a position after the last request, nothing is left to find.
	if n, _, err := e.l.PruneFrom(ctx, created[2].Add(time.Nanosecond), cutoff, 2); err != nil || n != 0 {
		t.Fatalf("from past the last request: %d pruned, %v; want 0", n, err)
	}
	n, next, err = e.l.PruneFrom(ctx, next, cutoff, 2)
	if err != nil || n != 1 || !next.Equal(created[2]) {
		t.Fatalf("second batch: %d pruned, next %v, %v; want the third request", n, next, err)
	}
}
