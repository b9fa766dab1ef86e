package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
)

// The list pages through one status newest first, filters by target,
// subject and text, and a request's attempts come back in order, bounded.
func TestConsoleListAndAttempts(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	for i := range 30 {
		req := newRequest(fmt.Sprintf("req-%02d", i))
		if i%3 == 0 {
			req.Target = "jira"
		}
		if i == 7 {
			req.Title = "Printer on fire"
		}
		if _, err := e.l.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			continue // waiting
		}
		d := request.Delivery{RequestID: req.RequestID, Target: req.Target, State: string(request.StatusFailed), Attempts: 1,
			LastError: "permanent error (HTTP 422): no", Failure: request.FailureRejected,
			Attempt: &request.Attempt{At: time.Unix(100, 0), HTTPStatus: 422, Class: "permanent", Error: "no", Latency: time.Millisecond, Host: "h1"}}
		if err := e.l.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	f := ledger.RequestFilter{Status: string(request.StatusFailed), Limit: 4}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := e.l.ListRequests(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			if r.State != string(request.StatusFailed) {
				t.Fatalf("row %s is %s in the failed list", r.RequestID, r.State)
			}
			seen = append(seen, r.RequestID)
		}
		if p.Next == 0 {
			break
		}
		f.Before = p.Next
	}
	if len(seen) != 15 || seen[0] != "req-29" || seen[14] != "req-01" {
		t.Fatalf("failed list = %v, want the 15 odd ones newest first", seen)
	}
	p, err := e.l.ListRequests(ctx, ledger.RequestFilter{Status: string(request.StatusFailed), Target: "jira", Limit: 50})
	if err != nil || len(p.Rows) != 5 || p.Rows[0].RequestID != "req-27" {
		t.Fatalf("failed of jira = %+v, %v; want 5 from req-27", p.Rows, err)
	}
	p, err = e.l.ListRequests(ctx, ledger.RequestFilter{Status: ledger.ListWaiting, Limit: 50})
	if err != nil || len(p.Rows) != 15 || p.Rows[0].RequestID != "req-28" || p.Rows[0].State != ledger.ListWaiting {
		t.Fatalf("waiting = %+v, %v; want 15 from req-28", p.Rows, err)
	}
	p, err = e.l.ListRequests(ctx, ledger.RequestFilter{Text: "on fire", Limit: 50})
	if err != nil || len(p.Rows) != 1 || p.Rows[0].RequestID != "req-07" {
		t.Fatalf("text = %+v, %v", p.Rows, err)
	}
	p, err = e.l.ListRequests(ctx, ledger.RequestFilter{Subject: "someone-else", Limit: 50})
	if err != nil || len(p.Rows) != 0 {
		t.Fatalf("another subject's = %+v, %v", p.Rows, err)
	}
	if _, err := e.l.ListRequests(ctx, ledger.RequestFilter{Status: "lost", Limit: 5}); err == nil {
		t.Fatal("an unknown status was listed")
	}

	// More attempts than kept: the newest KeptAttempts remain, in order.
	d, _, err := e.l.Delivery(ctx, "req-03")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.l.Redrive(ctx, "req-03"); err != nil {
		t.Fatal(err)
	}
	d, _, _ = e.l.Delivery(ctx, "req-03")
	for i := 1; i <= ledger.KeptAttempts+5; i++ {
		d.State, d.Attempts = string(request.StatusRetrying), i
		d.Attempt = &request.Attempt{At: time.Unix(1000+int64(i), 0), HTTPStatus: 503, Class: "transient", Host: "h2"}
		if err := e.l.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		d.Version++
	}
	as, err := e.l.Attempts(ctx, "req-03")
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != ledger.KeptAttempts || as[0].Attempt != 6 || as[len(as)-1].Attempt != ledger.KeptAttempts+5 || as[0].HTTPStatus != 503 {
		t.Fatalf("kept %d attempts, first %+v; want the newest %d", len(as), as[0], ledger.KeptAttempts)
	}
	as, err = e.l.Attempts(ctx, "req-05")
	if err != nil || len(as) != 1 || as[0].Latency != time.Millisecond || as[0].Outcome != "failed" || as[0].Host != "h1" {
		t.Fatalf("attempts of req-05 = %+v, %v", as, err)
	}
	le, err := e.l.LastErrors(ctx, []string{"local", "jira", "none"})
	if err != nil || le["jira"].Error == "" || le["local"].Error == "" || len(le) != 2 {
		t.Fatalf("last errors = %+v, %v", le, err)
	}
}

// Every page the console lists reads an index range (or the requests'
// primary key, newest first) and sorts nothing: on a million requests a
// page that scans or sorts takes seconds, not milliseconds. The request's
// page reads its comments and updates through requests_on. SQLite plans
// without statistics here as on a large ledger (the ledger runs no
// ANALYZE), so the plans of an empty file are the ones a full one gets.
func TestConsoleQueriesReadIndexes(t *testing.T) {
	e := openEnv(t, dbPath(t))
	db := fixture.Raw(t, e.path)
	plan := func(q string, args ...any) string { t.Helper(); return explain(t, db, q, args...) }
	statuses := []string{ledger.ListAll, ledger.ListWaiting, ledger.ListInFlight, string(request.StatusRetrying),
		string(request.StatusFailed), string(request.StatusUncertain), string(request.StatusDelivered)}
	from, to := time.Unix(1_700_000_000, 0), time.Unix(1_700_086_400, 0)
	times := []struct{ from, to time.Time }{{}, {from, time.Time{}}, {time.Time{}, to}, {from, to}}
	texts := []struct {
		text      string
		requestID bool
	}{{"", false}, {"disk full", false}, {"ops:req-1", true}}
	checked := 0
	for _, cluster := range []bool{false, true} {
		fingerprints := []string{"", "fp-1"}
		for _, status := range statuses {
			for _, target := range []string{"", "jira"} {
				for _, subject := range []string{"", "s"} {
					for _, fp := range fingerprints {
						for _, text := range texts {
							for _, tr := range times {
								for _, before := range []int64{0, 500_000} {
									f := ledger.RequestFilter{Status: status, Target: target, Subject: subject, Fingerprint: fp, Text: text.text,
										From: tr.from, To: tr.to, Before: before, Limit: 50}
									qs, args, err := ledger.ListQueriesForTest(f, cluster, text.requestID, 1000, 900_000)
									if err != nil {
										t.Fatal(err)
									}
									// Only the list of every request without a
									// filter walks the requests: by id, newest
									// first, stopping at a page.
									walk := f == ledger.RequestFilter{Status: ledger.ListAll, Before: before, Limit: 50}
									for i, q := range qs {
										p := plan(q, args[i]...)
										checked++
										name := fmt.Sprintf("cluster=%v %+v (candidate %d)", cluster, f, i)
										if strings.Contains(p, "TEMP B-TREE") {
											t.Errorf("%s sorts its rows: %s", name, p)
										}
										for _, step := range strings.Split(p, "; ") {
											// Scanned whole are only the waiting
											// requests (every row a match), the
											// requests accepted out of order; the
											// full-text index reads its own.
											if tbl, ok := strings.CutPrefix(step, "SCAN "); ok && !strings.Contains(step, "VIRTUAL TABLE INDEX") {
												tbl, _, _ = strings.Cut(tbl, " ")
												if !(tbl == "u" || tbl == "late" || tbl == "f" || (walk && tbl == "r")) {
													t.Errorf("%s scans %s: %s", name, tbl, p)
												}
											}
										}
										if !walk && !strings.Contains(p, "USING") && !strings.Contains(p, "VIRTUAL TABLE") && !strings.Contains(p, "SCAN u") {
											t.Errorf("%s reads no index: %s", name, p)
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d plans checked", checked)
	if p := plan(ledger.ActionsQueryForTest, "req-1", 10); !strings.Contains(p, "requests_on") || strings.Contains(p, "SCAN r") {
		t.Errorf("a request's comments and updates are not read through requests_on: %s", p)
	}
	// The console's indexes must not draw the accept path's lookups off
	// their unique keys: a comment's ticket is one row, not a walk of its
	// caller's requests.
	if p := plan(ledger.TicketOfQueryForTest, "s", "tkt_x", "s:req"); !strings.Contains(p, "requests_ticket") || strings.Contains(p, "requests_subject") || strings.Contains(p, "SCAN") {
		t.Errorf("a comment's ticket is not read by its ticket id or request id: %s", p)
	}
}

// explain is the query plan of q with args: its steps, joined by "; ".
func explain(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	return fixture.QueryPlan(t, db, q, args...)
}

// The retrying list holds the retrying records and the attempts waiting
// for their lookup (attempting with a next attempt time), not the calls in
// flight, newest first across both, page after page; in the ledger's list
// and in the cluster copy's.
func TestRetryingListMergesItsStates(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	states := []string{string(request.StatusRetrying), request.DeliveryAttempting, "in flight", string(request.StatusRetrying), "delivered"}
	var want []string
	var recs []request.CopiedRecord
	for i := range 25 {
		req := newRequest(fmt.Sprintf("req-%02d", i))
		if _, err := e.l.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
		state := states[i%len(states)]
		d := request.Delivery{RequestID: req.RequestID, Target: req.Target, State: state, Attempts: 1}
		if state == request.DeliveryAttempting {
			d.NextAttemptAt = time.Unix(2_000_000_000, 0)
		}
		if state == "in flight" {
			d.State = request.DeliveryAttempting
		}
		if err := e.l.RecordDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		rec := clusterRec(i, "host-a", d.State, 1, uint64(i+1))
		rec.RequestID = req.RequestID
		if rec.Delivery != nil {
			rec.Delivery.NextAttemptAt = d.NextAttemptAt
		}
		recs = append(recs, rec)
		if state == string(request.StatusRetrying) || state == request.DeliveryAttempting {
			want = append([]string{req.RequestID}, want...)
		}
	}
	if err := e.l.FoldRecords(ctx, recs, 25); err != nil {
		t.Fatal(err)
	}
	for name, list := range map[string]func(context.Context, ledger.RequestFilter) (ledger.RequestPage, error){
		"ledger": e.l.ListRequests, "cluster copy": e.l.ListCluster} {
		var got []string
		f := ledger.RequestFilter{Status: string(request.StatusRetrying), Limit: 4}
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("%s: paging does not end", name)
			}
			p, err := list(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Rows {
				if r.State != string(request.StatusRetrying) {
					t.Errorf("%s: %s is %s in the retrying list", name, r.RequestID, r.State)
				}
				got = append(got, r.RequestID)
			}
			if p.Next == 0 {
				break
			}
			f.Before = p.Next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: retrying list %v, want %v", name, got, want)
		}
	}
}
