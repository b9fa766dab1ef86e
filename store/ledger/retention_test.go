package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
)

func settle(t *testing.T, e *env, id, state string) {
	t.Helper()
	if err := e.l.RecordDelivery(context.Background(), request.Delivery{RequestID: id, Target: "local", State: state, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestRedriveAndResolve(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	db := fixture.Raw(t, e.path)
	for _, id := range []string{"failed-1", "delivered-1", "uncertain-1"} {
		if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, e, "failed-1", string(request.StatusFailed))
	settle(t, e, "delivered-1", string(request.StatusDelivered))
	settle(t, e, "uncertain-1", string(request.StatusUncertain))
	if _, err := db.Exec(`UPDATE outbox SET published_at = 1`); err != nil {
		t.Fatal(err)
	}

	if err := e.l.Redrive(ctx, "failed-1"); err != nil {
		t.Fatal(err)
	}
	st, err := e.l.Find(ctx, "", "failed-1")
	if err != nil || st.Status != request.StatusRetrying || st.Attempts != 0 {
		t.Fatalf("after redrive: %+v, %v; want retrying with 0 attempts", st, err)
	}
	if got := fixture.Count(t, db, `SELECT count(*) FROM outbox WHERE request_id = 'failed-1' AND published_at IS NULL AND generation = 1`); got != 1 {
		t.Fatal("redrive did not queue the message again under generation 1")
	}
	for _, id := range []string{"delivered-1", "uncertain-1", "failed-1"} {
		if err := e.l.Redrive(ctx, id); !errors.Is(err, request.ErrState) {
			t.Errorf("Redrive(%s) = %v, want ErrState", id, err)
		}
	}
	// A request the ledger never accepted is no such request; one accepted
	// and not yet tried is on its way.
	if err := e.l.Redrive(ctx, "never-seen"); !errors.Is(err, request.ErrNotFound) || errors.Is(err, request.ErrState) {
		t.Errorf("Redrive(never-seen) = %v, want ErrNotFound", err)
	}
	if _, err := e.l.Create(ctx, newRequest("queued-1")); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Redrive(ctx, "queued-1"); !errors.Is(err, request.ErrState) || !strings.Contains(err.Error(), "on its way") {
		t.Errorf("Redrive(queued-1) = %v, want ErrState: still on its way", err)
	}
	if err := e.l.Resolve(ctx, "delivered-1", true, "X-1"); !errors.Is(err, request.ErrState) {
		t.Errorf("Resolve of a delivered request = %v, want ErrState", err)
	}
	if err := e.l.Resolve(ctx, "uncertain-1", true, "ZD-42"); err != nil {
		t.Fatal(err)
	}
	st, err = e.l.Find(ctx, "", "uncertain-1")
	if err != nil || st.Status != request.StatusDelivered || st.ExternalID != "ZD-42" {
		t.Fatalf("after resolve: %+v, %v", st, err)
	}
}

// The prune walks requests by age and stops at the cutoff: it must not read
// every settled delivery record and sort them (a full scan inside the write
// transaction, growing with the ledger).
func TestPruneWalksRequestsByAge(t *testing.T) {
	e := openEnv(t, dbPath(t))
	joined := explain(t, fixture.Raw(t, e.path), ledger.PruneQueryForTest, 0, 1, "delivered", "failed", 10)
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
		if _, err := e.l.Create(ctx, newRequest(id)); err != nil {
			t.Fatal(err)
		}
		created = append(created, e.clock.Now())
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: "local", State: string(request.StatusDelivered), Attempts: 1}); err != nil {
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
