package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"ticketrelay/front/advice"
	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

func TestCreateWritesLedgerTicketAndOutboxInOneGo(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	req := newRequest("req-create-1")
	now := e.clock.Now()

	res, err := e.l.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := request.Result{
		RequestID: req.RequestID, TicketID: ticket.IDFor(req.RequestID), Target: "local",
		Status: request.StatusQueued, CreatedAt: now, Replayed: false,
	}
	if res != want {
		t.Fatalf("Create = %+v, want %+v", res, want)
	}

	db := fixture.Raw(t, e.path)
	if got := rows(t, db); got != [3]int{1, 1, 1} {
		t.Fatalf("rows in requests/tickets/outbox = %v, want [1 1 1]", got)
	}
	var tool, target, hash, ticketID, stored string
	var created int64
	if err := db.QueryRow(`SELECT tool, target, args_hash, ticket_id, result, created_at FROM requests WHERE request_id = ?`,
		req.RequestID).Scan(&tool, &target, &hash, &ticketID, &stored, &created); err != nil {
		t.Fatal(err)
	}
	if tool != "create_ticket" || target != "local" || hash != req.Hash() || ticketID != want.TicketID || created != now.UnixNano() {
		t.Errorf("requests row = %q %q %q %q %d", tool, target, hash, ticketID, created)
	}
	var storedRes request.Result
	if err := json.Unmarshal([]byte(stored), &storedRes); err != nil || storedRes != want {
		t.Errorf("stored result = %+v (%v), want %+v", storedRes, err, want)
	}

	var title, body, priority, labels, reqID string
	if err := db.QueryRow(`SELECT request_id, title, body, priority, labels FROM tickets WHERE ticket_id = ?`, want.TicketID).
		Scan(&reqID, &title, &body, &priority, &labels); err != nil {
		t.Fatal(err)
	}
	if reqID != req.RequestID || title != req.Title || body != req.Body || priority != "urgent" || labels != `["disk","ops"]` {
		t.Errorf("tickets row = %q %q %q %q %q", reqID, title, body, priority, labels)
	}

	var subject string
	var payload []byte
	var outCreated int64
	var published *int64
	if err := db.QueryRow(`SELECT subject, payload, created_at, published_at FROM outbox WHERE request_id = ?`, req.RequestID).
		Scan(&subject, &payload, &outCreated, &published); err != nil {
		t.Fatal(err)
	}
	if subject != "tickets.local" || outCreated != now.UnixNano() || published != nil {
		t.Errorf("outbox row: subject %q created %d published %v", subject, outCreated, published)
	}
	// The message names the ticket (the ledger row holds it).
	var ref ticket.Ref
	if err := json.Unmarshal(payload, &ref); err != nil {
		t.Fatalf("outbox payload %s: %v", payload, err)
	}
	if ref != (ticket.Ref{RequestID: req.RequestID, TicketID: want.TicketID}) {
		t.Errorf("outbox payload = %s", payload)
	}
}

func TestCreateReplaysSameArguments(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	first, err := e.l.Create(ctx, newRequest("req-replay"))
	if err != nil {
		t.Fatal(err)
	}
	// data_version, read on one connection, changes when another
	// connection commits a change to the file.
	conn, err := fixture.Raw(t, e.path).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dataVersion := func() (v int64) {
		t.Helper()
		if err := conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := dataVersion()
	e.clock.Add(90e9) // a retry 90 s later answers with the original time

	again := newRequest("req-replay")
	again.Labels = []string{" ops", "disk", "disk"} // same set, other spelling
	if err := again.Normalize(); err != nil {
		t.Fatal(err)
	}
	res, err := e.l.Create(ctx, again)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	want := first
	want.Replayed = true
	live := res.Live
	res.Live = nil
	if res != want {
		t.Fatalf("replay = %+v, want %+v", res, want)
	}
	// The replay says where the request stands now, read in its transaction.
	if live == nil || live.Status != request.StatusQueued || live.TicketID != first.TicketID || advice.Advise(*live) == "" {
		t.Fatalf("replay's live status = %+v, want queued with a detail", live)
	}
	if got := rows(t, fixture.Raw(t, e.path)); got != [3]int{1, 1, 1} {
		t.Fatalf("rows after replay = %v, want [1 1 1]", got)
	}
	if after := dataVersion(); after != before {
		t.Errorf("the replay committed a change to the file (data_version %d → %d)", before, after)
	}
}

func TestCreateConflictNamesTheTicketAndWritesNothing(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	first, err := e.l.Create(ctx, newRequest("req-conflict"))
	if err != nil {
		t.Fatal(err)
	}
	db := fixture.Raw(t, e.path)
	for name, edit := range map[string]func(r *ticket.Request){
		"title":    func(r *ticket.Request) { r.Title = "Disk full on db-2" },
		"priority": func(r *ticket.Request) { r.Priority = "low" },
		"labels":   func(r *ticket.Request) { r.Labels = []string{"ops"} },
		"body":     func(r *ticket.Request) { r.Body += " " },
		"target":   func(r *ticket.Request) { r.Target = "jira"; r.Tool = "create_ticket_jira" },
	} {
		t.Run(name, func(t *testing.T) {
			r := newRequest("req-conflict")
			edit(&r)
			res, err := e.l.Create(ctx, r)
			if !errors.Is(err, request.ErrConflict) {
				t.Fatalf("Create = %+v, %v; want ErrConflict", res, err)
			}
			var ce *request.ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not *ConflictError", err)
			}
			if *ce != (request.ConflictError{RequestID: "req-conflict", TicketID: first.TicketID, Tool: "create_ticket"}) {
				t.Errorf("ConflictError = %+v", *ce)
			}
			if !strings.Contains(err.Error(), first.TicketID) || !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("message %q does not name ticket %s", err.Error(), first.TicketID)
			}
			if res != (request.Result{}) {
				t.Errorf("result on conflict = %+v, want zero", res)
			}
			if got := rows(t, db); got != [3]int{1, 1, 1} {
				t.Errorf("rows = %v, want [1 1 1]", got)
			}
			if title := queryString(t, db, `SELECT title FROM tickets`); title != "Disk full on db-1" {
				t.Errorf("stored title became %q", title)
			}
		})
	}
}

func queryString(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	var s string
	if err := db.QueryRow(q, args...).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConcurrentIdenticalCreatesCommitOnce(t *testing.T) {
	e := openEnv(t, dbPath(t))
	const n = 64
	start := make(chan struct{})
	results := make([]request.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.l.Create(context.Background(), newRequest("req-same"))
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if !results[i].Replayed {
			created++
		}
		r, r0 := results[i], results[0]
		r.Replayed, r.Live, r0.Live = r0.Replayed, nil, nil
		if r != r0 {
			t.Errorf("call %d answered %+v, call 0 %+v", i, results[i], results[0])
		}
	}
	if created != 1 {
		t.Fatalf("%d of %d identical calls created the ticket, want exactly 1", created, n)
	}
	if got := rows(t, fixture.Raw(t, e.path)); got != [3]int{1, 1, 1} {
		t.Fatalf("rows = %v, want [1 1 1]", got)
	}
}

func TestConcurrentDistinctCreatesShareCommits(t *testing.T) {
	e := openEnv(t, dbPath(t))
	const n = 200
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			var res request.Result
			res, errs[i] = e.l.Create(context.Background(), newRequest(fmt.Sprintf("req-%03d", i)))
			if errs[i] == nil && res.Replayed {
				errs[i] = errors.New("a new request was answered as a replay")
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, fixture.Raw(t, e.path)); got != [3]int{n, n, n} {
		t.Fatalf("rows = %v, want [%d %d %d]", got, n, n, n)
	}
	batches, ops := histogram(t, e.m.BatchSize)
	if ops != n {
		t.Errorf("sum of batch sizes = %v, want %d (one per Create)", ops, n)
	}
	if batches >= n {
		t.Errorf("%d transactions for %d operations: no group commit happened", batches, n)
	}
	if c := counter(t, e.m.CommitErrors); c != 0 {
		t.Errorf("commit errors = %v", c)
	}
	t.Logf("%d creates in %d transactions", n, batches)
}
