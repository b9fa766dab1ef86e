package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
)

func clusterRec(i int, host, state string, version int64, rev uint64) request.CopiedRecord {
	r := request.CopiedRecord{Key: fmt.Sprintf("r.k%07d", i), RequestID: fmt.Sprintf("ops:req-%07d", i), Subject: "ops",
		TicketID: fmt.Sprintf("T%07d", i), Target: []string{"hook", "chat"}[i%2], Title: fmt.Sprintf("ticket %d", i),
		Host: host, Phase: "accepted", AcceptedAt: time.Unix(1_700_000_000+int64(i), 0).UTC(), Rev: rev}
	if state != "" {
		r.Delivery = &request.Delivery{State: state, Attempts: int(version), LastError: "e" + state, UpdatedAt: r.AcceptedAt.Add(time.Second), Version: version}
		r.By = host
	}
	return r
}

// The copy keeps a record's newest write (an older one arriving late
// changes nothing), a delivery record's writes as attempts, forgets a
// deleted record, lists by status, target and page as the ledger's list
// does, and prunes what the stream no longer holds.
func TestClusterCopyFolds(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	var recs []request.CopiedRecord
	for i := range 120 {
		recs = append(recs, clusterRec(i, "host-a", "", 0, uint64(i+1)))
	}
	if err := e.l.FoldRecords(ctx, recs, 120); err != nil {
		t.Fatal(err)
	}
	// Request 7 retried on host b, then failed on host a; a stale write
	// (rev 5) of it arrives after.
	if err := e.l.FoldRecords(ctx, []request.CopiedRecord{clusterRec(7, "host-b", "retrying", 1, 121), clusterRec(7, "host-a", "failed", 2, 122),
		clusterRec(7, "host-a", "", 0, 5), clusterRec(8, "host-a", "delivered", 1, 123)}, 123); err != nil {
		t.Fatal(err)
	}
	failed, err := e.l.ListCluster(ctx, ledger.RequestFilter{Status: "failed", Limit: 50})
	if err != nil || len(failed.Rows) != 1 || failed.Rows[0].RequestID != "ops:req-0000007" || failed.Rows[0].Host != "host-a" || failed.Rows[0].Attempts != 2 {
		t.Fatalf("failed list: %+v, %v", failed, err)
	}
	attempts, err := e.l.ClusterAttempts(ctx, "ops:req-0000007")
	if err != nil || len(attempts) != 2 || attempts[0].Host != "host-b" || attempts[1].Outcome != "failed" {
		t.Fatalf("attempts: %+v, %v", attempts, err)
	}
	waiting, _ := e.l.ListCluster(ctx, ledger.RequestFilter{Status: ledger.ListWaiting, Target: "hook", Limit: 50})
	if len(waiting.Rows) != 50 || waiting.Next == 0 || waiting.Rows[0].RequestID != "ops:req-0000118" {
		t.Fatalf("waiting on hook, first page: %d rows, next %d, first %+v", len(waiting.Rows), waiting.Next, waiting.Rows[0])
	}
	rest, _ := e.l.ListCluster(ctx, ledger.RequestFilter{Status: ledger.ListWaiting, Target: "hook", Limit: 50, Before: waiting.Next})
	ids := map[string]bool{}
	for _, r := range slices.Concat(waiting.Rows, rest.Rows) {
		ids[r.RequestID] = true
	}
	if len(ids) != 59 || rest.Next != 0 || ids["ops:req-0000008"] {
		t.Fatalf("waiting on hook over two pages: %d distinct (want 59: 60 minus the delivered one), next %d", len(ids), rest.Next)
	}
	if cur, _ := e.l.ClusterCursor(ctx, request.CopyRecords); cur != 123 {
		t.Fatalf("cursor %d, want 123", cur)
	}

	if err := e.l.FoldRecords(ctx, []request.CopiedRecord{{Key: "r.k0000007", Rev: 124, Deleted: true}}, 124); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := e.l.ClusterRequest(ctx, "ops:req-0000007"); found {
		t.Fatal("a deleted record is still in the copy")
	}
	// The bucket's first sequence is now 100: rows last written below it
	// expired.
	for {
		n, err := e.l.PruneClusterCopy(ctx, 100, 0, 30)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	all, _ := e.l.ListCluster(ctx, ledger.RequestFilter{Limit: 500})
	if len(all.Rows) != 22 { // revs 100..120, and 123 (request 8)
		t.Fatalf("after pruning below 100: %d rows, want 22", len(all.Rows))
	}
	if _, found, _ := e.l.ClusterRequest(ctx, "ops:req-0000008"); !found {
		t.Fatal("a record written after the first sequence was pruned")
	}
}

// BenchmarkListCluster: a page of the copy over a million records, by
// status and by status and target (run with -bench ListCluster).
func BenchmarkListCluster(b *testing.B) {
	l, _ := benchLedger(b)
	ctx := context.Background()
	const n = 1_000_000
	states := []string{"", "delivered", "delivered", "delivered", "retrying", "failed", "uncertain", "delivered"}
	batch := make([]request.CopiedRecord, 0, 5000)
	for i := range n {
		batch = append(batch, clusterRec(i, fmt.Sprintf("host-%d", i%3), states[i%len(states)], 1, uint64(i+1)))
		if len(batch) == cap(batch) {
			if err := l.FoldRecords(ctx, batch, uint64(i+1)); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	filters := []ledger.RequestFilter{{Status: "failed", Limit: 50}, {Status: "uncertain", Target: "hook", Limit: 50},
		{Status: ledger.ListWaiting, Limit: 50}, {Limit: 50}, {Status: "retrying", Limit: 50, Before: n / 2}}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		p, err := l.ListCluster(ctx, filters[i%len(filters)])
		if err != nil || len(p.Rows) == 0 {
			b.Fatal(err, len(p.Rows))
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// A delivery record write that carries the call it ended is kept with
// that call's time, HTTP status, class, latency and error; one without
// (a claim before a call, or written by an older build) with zeros, at
// the write's time.
func TestClusterCopyKeepsCalls(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	plain := clusterRec(3, "host-b", "retrying", 1, 1)
	called := clusterRec(3, "host-b", "delivered", 2, 2)
	start := called.Delivery.UpdatedAt.Add(-time.Second)
	called.Delivery.Attempt = &request.Attempt{At: start, HTTPStatus: 0, Latency: 42 * time.Millisecond, Error: ""}
	failed := clusterRec(3, "host-b", "failed", 3, 3)
	failed.Delivery.Attempt = &request.Attempt{At: start.Add(time.Minute), HTTPStatus: 422, Class: "permanent", Error: "HTTP 422: bad field",
		Latency: 7 * time.Millisecond}
	if err := e.l.FoldRecords(ctx, []request.CopiedRecord{plain, called, failed}, 3); err != nil {
		t.Fatal(err)
	}
	got, err := e.l.ClusterAttempts(ctx, plain.RequestID)
	if err != nil || len(got) != 3 {
		t.Fatalf("ClusterAttempts: %+v, %v", got, err)
	}
	if a := got[0]; !a.At.Equal(plain.Delivery.UpdatedAt) || a.HTTPStatus != 0 || a.Class != "" || a.Latency != 0 || a.Error != "eretrying" {
		t.Errorf("a write without its call: %+v; want the write's time and error, no call", a)
	}
	if a := got[1]; !a.At.Equal(start) || a.Latency != 42*time.Millisecond || a.Outcome != "delivered" || a.Host != "host-b" || a.Attempt != 2 {
		t.Errorf("the delivering call: %+v", a)
	}
	if a := got[2]; a.HTTPStatus != 422 || a.Class != "permanent" || a.Error != "HTTP 422: bad field" || a.Latency != 7*time.Millisecond {
		t.Errorf("the refused call: %+v", a)
	}
}

// A request's page reads the other hosts' attempts and audit entries from
// the copy by index, never by a scan of the copy (checked on an empty
// file: no ANALYZE, so the plans are a full one's).
func TestClusterRequestQueriesReadIndexes(t *testing.T) {
	e := openEnv(t, dbPath(t))
	db := fixture.Raw(t, e.path)
	for name, c := range map[string]struct{ q, want string }{
		"attempts": {ledger.ClusterAttemptsQueryForTest, "SEARCH r USING COVERING INDEX cluster_requests_request_id (request_id=?); SEARCH a USING PRIMARY KEY (id=?)"},
		"trail":    {ledger.ClusterTrailQueryForTest, "SEARCH cluster_trail USING PRIMARY KEY (request_id=?)"},
	} {
		p := explain(t, db, c.q, "ops:req-1")
		if !strings.Contains(p, c.want) || strings.Contains(p, "SCAN") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("a request's %s in the copy: plan %s; want %s, no scan, no sort", name, p, c.want)
		}
	}
}
