package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

func userVersion(t *testing.T, path string) int {
	t.Helper()
	return fixture.Count(t, fixture.Raw(t, path), `PRAGMA user_version`)
}

func TestReopenKeepsDataAndSchemaVersion(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	e1 := wrapEnv(t, path, db)
	first, err := e1.l.Create(ctx, newRequest("req-persist"))
	if err != nil {
		t.Fatal(err)
	}
	v := userVersion(t, path)
	if v < 1 {
		t.Fatalf("user_version = %d after Open, want the migration count", v)
	}
	e1.w.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	e2 := openEnv(t, path)
	if got := userVersion(t, path); got != v {
		t.Fatalf("user_version = %d after reopening, was %d", got, v)
	}
	res, err := e2.l.Create(ctx, newRequest("req-persist"))
	if err != nil {
		t.Fatal(err)
	}
	want := first
	want.Replayed = true
	if res.Live = nil; res != want {
		t.Fatalf("Create after reopen = %+v, want replay of %+v", res, first)
	}
	st, err := e2.l.Find(ctx, "", "req-persist")
	if err != nil || st.Status != request.StatusQueued || st.TicketID != first.TicketID {
		t.Fatalf("Find after reopen = %+v, %v", st, err)
	}
}

// The two processes open the same file at the same moment (make run starts
// both on a fresh data dir), then write to it side by side.
func TestTwoHandlesOnOneFile(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	var dbs [2]*sqlitedb.DB
	var errs [2]error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-start
			dbs[i], errs[i] = store.Open(ctx, path)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open %d: %v", i, err)
		}
	}
	a, b := wrapEnv(t, path, dbs[0]), wrapEnv(t, path, dbs[1])
	v := userVersion(t, path)

	const n = 40
	type answer struct {
		res request.Result
		err error
	}
	answers := make([][2]answer, n)
	for i := range n {
		for j, e := range []*env{a, b} {
			wg.Go(func() {
				// Even ids are sent to both processes, odd ids to one only.
				id := fmt.Sprintf("req-%02d", i)
				if i%2 == 1 {
					id = fmt.Sprintf("req-%02d-%d", i, j)
				}
				res, err := e.l.Create(ctx, newRequest(id))
				answers[i][j] = answer{res, err}
			})
		}
	}
	wg.Wait()
	want := 0
	for i, pair := range answers {
		for j, ans := range pair {
			if ans.err != nil {
				t.Fatalf("create %d on handle %d: %v", i, j, ans.err)
			}
		}
		if i%2 == 0 {
			want++
			if pair[0].res.Replayed == pair[1].res.Replayed || pair[0].res.TicketID != pair[1].res.TicketID {
				t.Errorf("req-%02d on both handles: %+v and %+v; want one creation and one replay", i, pair[0].res, pair[1].res)
			}
		} else {
			want += 2
			if pair[0].res.Replayed || pair[1].res.Replayed {
				t.Errorf("distinct ids answered as replays: %+v %+v", pair[0].res, pair[1].res)
			}
		}
	}
	if got := rows(t, fixture.Raw(t, path)); got != [3]int{want, want, want} {
		t.Fatalf("rows = %v, want %d of each", got, want)
	}
	// Each handle sees what the other wrote.
	for _, id := range []string{"req-01-1", "req-01-0"} {
		for name, e := range map[string]*env{"a": a, "b": b} {
			if st, err := e.l.Find(ctx, "", id); err != nil || st.Status != request.StatusQueued {
				t.Errorf("handle %s Find(%s) = %+v, %v", name, id, st, err)
			}
		}
	}
	// Opening a third time migrates nothing.
	c := openEnv(t, path)
	if got := userVersion(t, c.path); got != v {
		t.Errorf("user_version = %d after a third Open, want %d", got, v)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := dbPath(t)
	openEnv(t, path)
	v := userVersion(t, path)
	if _, err := fixture.Raw(t, path).Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), path)
	if err == nil {
		db.Close()
		t.Fatal("Open accepted a database from a newer binary")
	}
	if !strings.Contains(err.Error(), "newer than this binary") {
		t.Fatalf("Open error = %v", err)
	}
	if _, err := store.Open(context.Background(), ""); err == nil {
		t.Fatal("Open accepted an empty path")
	}
}

// A database written by a binary of schema 2 (tickets in their own table)
// keeps every ticket, replays its requests and reports their status after
// migration 3 moves the tickets into the ledger rows.
func TestMigrationKeepsTicketsOfSchema2(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	old := atSchema(t, path, 2)
	req := newRequest("req-schema2")
	stmts := []struct {
		query string
		args  []any
	}{
		{`INSERT INTO requests (request_id, tool, target, args_hash, ticket_id, result, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			[]any{req.RequestID, req.Tool, req.Target, req.Hash(), "tkt_old",
				`{"request_id":"req-schema2","ticket_id":"tkt_old","target":"local","status":"queued","created_at":"2026-11-01T00:00:00Z","replayed":false}`, int64(1)}},
		{`INSERT INTO tickets (ticket_id, request_id, title, body, priority, labels, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			[]any{"tkt_old", req.RequestID, req.Title, req.Body, req.Priority, `["disk","ops"]`, int64(1)}},
		{`INSERT INTO outbox (request_id, subject, payload, created_at) VALUES (?, 'tickets.local', '{}', 1)`, []any{req.RequestID}},
	}
	for _, s := range stmts {
		if _, err := old.Exec(s.query, s.args...); err != nil {
			t.Fatalf("%s: %v", s.query, err)
		}
	}

	e := openEnv(t, path)
	if got, want := userVersion(t, path), len(migrationsUpTo(3)); got < want {
		t.Fatalf("user_version = %d after Open, want at least %d", got, want)
	}
	res, err := e.l.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || res.TicketID != "tkt_old" {
		t.Fatalf("Create after migration = %+v, want a replay of tkt_old", res)
	}
	var title, body, priority, labels string
	err = fixture.Raw(t, path).QueryRow(`SELECT title, body, priority, labels FROM tickets WHERE ticket_id = 'tkt_old'`).
		Scan(&title, &body, &priority, &labels)
	if err != nil {
		t.Fatal(err)
	}
	if title != req.Title || body != req.Body || priority != req.Priority || labels != `["disk","ops"]` {
		t.Fatalf("ticket after migration = %q %q %q %q", title, body, priority, labels)
	}
	if st, err := e.l.Find(ctx, "", req.RequestID); err != nil || st.TicketID != "tkt_old" || st.Status != request.StatusQueued {
		t.Fatalf("Find after migration = %+v, %v", st, err)
	}
}

// A database written by a binary of schema 4 (delivery records keyed by
// request id) keeps every record after migration 5 keys them by the ledger
// row's id: find_request reports them, and an operator can still redrive.
func TestMigrationKeepsDeliveriesOfSchema4(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	old := atSchema(t, path, 4)
	for i, c := range []struct{ id, state, extID string }{
		{"req-delivered", "delivered", "line-7"},
		{"req-failed", "failed", ""},
		{"req-queued", "", ""},
	} {
		req := newRequest(c.id)
		rowID := int64(10 + i)
		insertPublished(t, old, rowID, req, "tkt_"+c.id)
		if c.state == "" {
			continue
		}
		if _, err := old.Exec(`INSERT INTO deliveries (request_id, target, state, attempts, last_error, external_id, updated_at)
			VALUES (?, 'local', ?, 1, ?, ?, 3)`, req.RequestID, c.state, "HTTP 400 "+c.state, c.extID); err != nil {
			t.Fatal(err)
		}
	}

	e := openEnv(t, path)
	if got, want := userVersion(t, path), len(migrationsUpTo(5)); got < want {
		t.Fatalf("user_version = %d after Open, want at least %d", got, want)
	}
	for id, want := range map[string]request.Status{
		"req-delivered": request.StatusDelivered, "req-failed": request.StatusFailed, "req-queued": request.StatusPublished,
	} {
		st, err := e.l.Find(ctx, "", id)
		if err != nil || st.Status != want {
			t.Fatalf("Find(%s) after migration = %+v, %v; want %s", id, st, err, want)
		}
		if id == "req-delivered" && st.ExternalID != "line-7" {
			t.Fatalf("Find(%s) after migration: external id %q, want line-7", id, st.ExternalID)
		}
	}
	// Records written before migration 6 start at version 1 (0 means none).
	if d, found, err := e.l.Delivery(ctx, "req-delivered"); err != nil || !found || d.Version != 1 {
		t.Fatalf("Delivery(req-delivered) after migration = %+v, %v, %v; want version 1", d, found, err)
	}
	if err := e.l.Redrive(ctx, "req-failed"); err != nil {
		t.Fatalf("Redrive after migration: %v", err)
	}
	if st, err := e.l.Find(ctx, "", "req-failed"); err != nil || st.Status != request.StatusRetrying {
		t.Fatalf("Find after redrive = %+v, %v; want retrying", st, err)
	}
	if n := fixture.Count(t, fixture.Raw(t, path), `SELECT count(*) FROM deliveries WHERE id IN (10, 11)`); n != 2 {
		t.Fatalf("%d delivery records under the ledger rows' ids, want 2", n)
	}
}

// atSchema makes the database at path as a binary of schema version n left
// it, and returns a plain handle on it.
func atSchema(t *testing.T, path string, n int) *sql.DB {
	t.Helper()
	db := fixture.Raw(t, path)
	for i, m := range migrationsUpTo(n) {
		if _, err := db.Exec(m); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
	}
	if _, err := db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, n)); err != nil {
		t.Fatal(err)
	}
	return db
}

// The ledger holds every ticket: a new database and its -wal and -shm files
// are readable by their owner only.
func TestNewDatabaseIsPrivate(t *testing.T) {
	e := openEnv(t, dbPath(t))
	if _, err := e.l.Create(context.Background(), newRequest("req-private")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{e.path, e.path + "-wal", e.path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), m)
		}
	}
}

// A database written by a binary of schema 10 (a failed delivery's class
// only in its error's text) keeps every record after migration 11 adds the
// class: each failed request is advised as before, and records that are
// not failed get no class.
func TestMigrationClassifiesFailuresOfSchema10(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()
	old := atSchema(t, path, 10)
	cases := []struct {
		id, state, lastError string
		want                 request.Failure
	}{
		{"req-rejected", "failed", "permanent error (HTTP 422): title too long", request.FailureRejected},
		{"req-auth", "failed", "auth error (HTTP 401): invalid token", request.FailureAuth},
		{"req-exhausted", "failed", "10 attempts exhausted; last error: transient error (HTTP 503): unavailable", request.FailureExhausted},
		{"req-settled", "failed", "settled as not delivered by an operator", request.FailureSettled},
		{"req-other", "failed", "permanent error: encoding the request: json: unsupported value", request.FailurePermanent},
		{"req-5xx", "failed", "permanent error (HTTP 501): not implemented", request.FailurePermanent},
		{"req-retrying", "retrying", "permanent error (HTTP 422): not failed", request.FailureUnknown},
	}
	for i, c := range cases {
		req := newRequest(c.id)
		rowID := int64(10 + i)
		insertPublished(t, old, rowID, req, "tkt_"+c.id)
		if _, err := old.Exec(`INSERT INTO deliveries (id, target, state, attempts, last_error, updated_at) VALUES (?, 'local', ?, 1, ?, 3)`,
			rowID, c.state, c.lastError); err != nil {
			t.Fatal(err)
		}
	}

	e := openEnv(t, path)
	if got, want := userVersion(t, path), len(migrationsUpTo(11)); got < want {
		t.Fatalf("user_version = %d after Open, want at least %d", got, want)
	}
	for _, c := range cases {
		d, found, err := e.l.Delivery(ctx, c.id)
		if err != nil || !found || d.Failure != c.want || d.LastError != c.lastError {
			t.Errorf("Delivery(%s) after migration = %+v, %v, %v; want failure %q", c.id, d, found, err, c.want)
		}
		st, err := e.find(ctx, "", c.id)
		if err != nil || st.Failure != c.want || string(st.Status) != c.state {
			t.Errorf("Find(%s) after migration = %+v, %v; want %s with failure %q", c.id, st, err, c.state, c.want)
		}
	}
	// The advice for the classified records is the one their text got.
	for id, words := range map[string]string{
		"req-rejected":  "rejected it (permanent error (HTTP 422): title too long)",
		"req-auth":      "refused ticketrelay's credentials",
		"req-exhausted": "may hold the ticket",
		"req-settled":   "settled this request as not delivered",
		"req-other":     "may hold it",
	} {
		if st, _ := e.find(ctx, "", id); !strings.Contains(st.Detail, words) {
			t.Errorf("%s after migration: detail %q lacks %q", id, st.Detail, words)
		}
	}
}

// insertPublished writes, through a handle on a file of an older schema,
// the request row of req at rowID with its ticket id and its outbox row,
// already published: what any schema since the outbox's had for them.
func insertPublished(t *testing.T, old *sql.DB, rowID int64, req ticket.Request, ticketID string) {
	t.Helper()
	if _, err := old.Exec(`INSERT INTO requests (id, request_id, tool, target, args_hash, ticket_id, result, created_at, title, body, priority, labels)
		VALUES (?, ?, ?, ?, ?, ?, '{}', 1, ?, ?, ?, '[]')`,
		rowID, req.RequestID, req.Tool, req.Target, req.Hash(), ticketID, req.Title, req.Body, req.Priority); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`INSERT INTO outbox (id, request_id, subject, payload, created_at, published_at) VALUES (?, ?, 'tickets.local', '{}', 1, 2)`,
		rowID, req.RequestID); err != nil {
		t.Fatal(err)
	}
}

// migrationsUpTo returns the database's first n migrations, so that a test
// can build a database as an older binary left it.
func migrationsUpTo(n int) []string {
	out := make([]string, n)
	for v := 1; v <= n; v++ {
		out[v-1] = store.Schema.SQL(v)
	}
	return out
}
