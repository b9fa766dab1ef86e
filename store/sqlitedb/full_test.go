package sqlitedb_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"ticketrelay/testkit/fixture"
)

// A full disk (SQLITE_FULL, simulated with max_page_count) fails the call
// with an error and leaves nothing half-written: the rows of a request are
// all there or none is. Once space is back, the same request succeeds.
func TestFullDiskWritesNothingHalfway(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	db := e.db.Reader()
	var pages int
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := e.db.LimitPagesForTest(pages); err != nil {
		t.Fatal(err)
	}
	var failed string
	for i := range 200 {
		r := newRequest(fmt.Sprintf("fill-%03d", i))
		r.Body = strings.Repeat("x", 4000) // a page a ticket, give or take
		if _, err := e.l.Create(ctx, r); err != nil {
			if !strings.Contains(err.Error(), "full") {
				t.Fatalf("create %d failed with %v; want a database-full error", i, err)
			}
			failed = r.RequestID
			break
		}
	}
	if failed == "" {
		t.Fatal("the capped database never filled up")
	}
	for _, table := range []string{"requests", "tickets", "outbox"} {
		if n := fixture.Count(t, db, `SELECT count(*) FROM `+table+` WHERE request_id = ?`, failed); n != 0 {
			t.Errorf("%s holds %d rows of the failed request", table, n)
		}
	}
	if r := rows(t, db); r[0] != r[1] || r[1] != r[2] {
		t.Fatalf("requests/tickets/outbox disagree after the failure: %v", r)
	}
	if err := e.db.LimitPagesForTest(1 << 30); err != nil {
		t.Fatal(err)
	}
	res, err := e.l.Create(ctx, newRequest(failed))
	if err != nil || res.Replayed {
		t.Fatalf("after space came back: %+v, %v; want the request created", res, err)
	}
}
