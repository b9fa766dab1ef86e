package trail_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/store"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/fixture"
)

// fill appends batches from .. from+batches-1 of n calls each, each call
// to a request of its own.
func fill(t testing.TB, s *trail.Store, at time.Time, from, batches, n int) {
	t.Helper()
	for b := from; b < from+batches; b++ {
		entries := make([]trail.Entry, n)
		for i := range entries {
			entries[i] = call(at, "bulk", "create_ticket", fmt.Sprintf("bulk:%d-%d", b, i), trail.Accepted)
		}
		if _, err := s.Append(context.Background(), entries); err != nil {
			t.Fatal(err)
		}
	}
}

// A request's entries are read through the request index: its calls
// (through the front's writer and directly), the operator's actions, in
// order, among many other requests' batches; the plan reads the index and
// the batches it names, never the whole trail; retention removes a
// batch's index rows with the batch.
func TestForRequestReadsTheIndex(t *testing.T) {
	s, path := openStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	const id = "alice:r1"
	fill(t, s, t0, 0, 50, 20)
	if _, err := s.Append(ctx, []trail.Entry{call(t0.Add(time.Second), "bulk", "create_ticket", "bulk:x", trail.Accepted),
		call(t0.Add(time.Second), "alice", "create_ticket", id, trail.Accepted)}); err != nil {
		t.Fatal(err)
	}
	fill(t, s, t0.Add(time.Minute), 50, 50, 20)
	w := trail.NewWriter(s, trail.WriterConfig{Linger: time.Millisecond}, quiet, time.Now, prometheus.NewRegistry())
	if err := w.Record(ctx, call(t0.Add(2*time.Minute), "alice", "create_ticket", id, trail.Replayed)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fill(t, s, t0.Add(3*time.Minute), 100, 50, 20)
	// The console and the command line record their actions through Record.
	if err := s.Record(ctx, trail.Entry{Time: t0.Add(4 * time.Minute), Kind: trail.KindOperator, Subject: "ada", Action: "redrive",
		RequestID: id, Outcome: trail.Done}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ForRequest(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range got {
		if e.RequestID != id {
			t.Errorf("ForRequest(%s) returned another request's entry: %+v", id, e)
		}
		outcomes = append(outcomes, e.Outcome)
	}
	if fmt.Sprint(outcomes) != "[accepted replayed done]" || got[2].Action != "redrive" {
		t.Fatalf("ForRequest: %+v; want the call, its replay and the redrive, in order", got)
	}
	if other, err := s.ForRequest(ctx, "bulk:120-7"); err != nil || len(other) != 1 {
		t.Fatalf("ForRequest of one bulk request: %+v, %v", other, err)
	}

	db := fixture.Raw(t, path)
	q, args := trail.QueryForTest(trail.Filter{RequestID: id})
	p := fixture.QueryPlan(t, db, q, args...)
	if !strings.Contains(p, "SEARCH r USING PRIMARY KEY (rkey=?") || !strings.Contains(p, "SEARCH t USING INTEGER PRIMARY KEY") ||
		strings.Contains(p, "SCAN") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("a request's entries are not read through the request index: %s", p)
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM trail_requests WHERE seq = (SELECT max(seq) FROM trail)`); n != 1 {
		t.Errorf("the operator's batch has %d index rows, want 1", n)
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM trail_requests WHERE seq = (SELECT min(seq) FROM trail)`); n != 20 {
		t.Errorf("a batch of 20 requests' calls has %d index rows, want 20", n)
	}

	// Retention: the batches of the first minute go, and their index rows
	// with them; everything, then nothing is left.
	if _, err := s.PruneBefore(ctx, t0.Add(90*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM trail_requests WHERE seq NOT IN (SELECT seq FROM trail)`); n != 0 {
		t.Errorf("%d index rows of pruned batches left", n)
	}
	if got, err := s.ForRequest(ctx, id); err != nil || len(got) != 2 || got[0].Outcome != trail.Replayed {
		t.Errorf("after pruning the first minute: %+v, %v; want the replay and the redrive", got, err)
	}
	if _, err := s.PruneBefore(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := fixture.Count(t, db, `SELECT count(*) FROM trail_requests`); n != 0 {
		t.Errorf("%d index rows left once every batch was pruned", n)
	}
}

// A trail an older binary stored is indexed by the migration: its
// requests' entries are found through the index, retention removes their
// index rows, and the table is append-only again afterwards.
func TestIndexMigrationKeysStoredBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v < trail.IndexVersion; v++ {
		if _, err := old.Exec(store.Schema.SQL(v)); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	lines := func(ids ...string) string {
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, `{"time":"2026-12-01T09:00:00Z","kind":"call","subject":"s","tool":"create_ticket","request_id":%q,"outcome":"accepted"}`+"\n", id)
		}
		return b.String()
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).UnixNano()
	for _, batch := range []string{lines("s:a", "s:b"), lines("s:c"), lines("s:a")} {
		if _, err := old.Exec(`INSERT INTO trail (first_at, last_at, entries) VALUES (?, ?, ?)`, t0, t0, []byte(batch)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, trail.IndexVersion-1)); err != nil {
		t.Fatal(err)
	}
	old.Close()

	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := trail.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if got, err := s.ForRequest(ctx, "s:a"); err != nil || len(got) != 2 {
		t.Fatalf("ForRequest of a request an older binary recorded twice: %+v, %v", got, err)
	}
	if got, err := s.ForRequest(ctx, "s:c"); err != nil || len(got) != 1 || got[0].RequestID != "s:c" {
		t.Fatalf("ForRequest after the migration: %+v, %v", got, err)
	}
	raw := fixture.Raw(t, path)
	if n := fixture.Count(t, raw, `SELECT count(*) FROM trail_requests`); n != 4 {
		t.Errorf("%d index rows after the migration, want 4 (a, b; c; a)", n)
	}
	if _, err := raw.Exec(`UPDATE trail SET entries = ''`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("UPDATE after the migration: %v; want it refused as append-only", err)
	}
	if _, err := s.PruneBefore(ctx, time.Unix(0, t0).Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := fixture.Count(t, raw, `SELECT count(*) FROM trail_requests`); n != 0 {
		t.Errorf("%d index rows left after the stored batches were pruned", n)
	}
}
