package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// scanCounts counts every target's requests by where they stand the slow
// way, reading the whole ledger: what request_counts must always equal.
func scanCounts(t *testing.T, e *env) map[string]int {
	t.Helper()
	return countRows(t, e, `SELECT target, shown, count(*) FROM (
			SELECT target, CASE WHEN state = 'attempting' AND next_attempt_at IS NOT NULL THEN 'retrying' ELSE state END AS shown FROM deliveries
			UNION ALL
			SELECT r.target, 'waiting' FROM requests r LEFT JOIN deliveries d ON d.id = r.id WHERE d.id IS NULL
		) GROUP BY target, shown`)
}

// pairs reads q's rows of two columns as "a/b".
func pairs(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a, b any
		if err := rows.Scan(&a, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%v/%v", a, b))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// countRows reads q's rows of (target, shown, n) as "target/shown": n.
func countRows(t *testing.T, e *env, q string) map[string]int {
	t.Helper()
	rows, err := fixture.Raw(t, e.path).Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var target, shown string
		var n int
		if err := rows.Scan(&target, &shown, &n); err != nil {
			t.Fatal(err)
		}
		out[target+"/"+shown] = n
	}
	return out
}

func keptCounts(t *testing.T, e *env) map[string]int {
	t.Helper()
	s, err := e.l.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, tc := range s.Targets {
		for shown, n := range map[string]int{"waiting": tc.Waiting, "attempting": tc.InFlight, "retrying": tc.Retrying,
			"failed": tc.Failed, "uncertain": tc.Uncertain, "delivered": tc.Delivered} {
			if n != 0 {
				out[tc.Target+"/"+shown] = n
			}
		}
	}
	return out
}

func sameCounts(t *testing.T, e *env, when string) {
	t.Helper()
	want, got := scanCounts(t, e), keptCounts(t, e)
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("%s: the counts kept on write %v; the ledger holds %v", when, got, want)
	}
	sameListIndex(t, e, when)
}

// sameListIndex checks the tables the console's lists read (decision
// 0156) against the ledger read whole: the requests without a delivery
// record, under their target, and those accepted out of order (earlier
// than a request of a smaller id).
func sameListIndex(t *testing.T, e *env, when string) {
	t.Helper()
	db := fixture.Raw(t, e.path)
	for _, c := range []struct{ name, kept, scanned string }{
		{"the requests without a delivery record", `SELECT id, target FROM undelivered ORDER BY id`,
			`SELECT r.id, r.target FROM requests r WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = r.id) ORDER BY r.id`},
		{"the requests accepted out of order", `SELECT id, created_at FROM requests_late ORDER BY id`,
			`SELECT r.id, r.created_at FROM requests r WHERE r.created_at < (SELECT max(o.created_at) FROM requests o WHERE o.id < r.id) ORDER BY r.id`},
	} {
		kept, scanned := pairs(t, db, c.kept), pairs(t, db, c.scanned)
		if fmt.Sprint(kept) != fmt.Sprint(scanned) {
			t.Fatalf("%s: %s kept on write %v; the ledger holds %v", when, c.name, kept, scanned)
		}
	}
}

// The counts kept on write equal a count over the whole ledger after each
// kind of write: accepting, every delivery record transition (a call in
// flight, a lookup pending, retrying, failed, uncertain, delivered, a
// move to another target), a redrive, a resolve and retention.
func TestCountsKeptOnWrite(t *testing.T) {
	e := openEnv(t, dbPath(t))
	ctx := context.Background()
	var ids []string
	for i := range 12 {
		req := newRequest(fmt.Sprintf("count-%02d", i))
		if i%3 == 0 {
			req.Target = "hook"
		}
		res, err := e.l.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.RequestID)
	}
	sameCounts(t, e, "after accepting 12")
	if c := keptCounts(t, e); c["local/waiting"] != 8 || c["hook/waiting"] != 4 {
		t.Fatalf("after accepting: %v; want 8 waiting for local, 4 for hook", c)
	}
	record := func(id, state string, version int64, next time.Time, target string) {
		t.Helper()
		if err := e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: target, State: state, Attempts: 1, NextAttemptAt: next,
			Version: version, LastError: "x"}); err != nil {
			t.Fatalf("record %s %s: %v", id, state, err)
		}
	}
	later := e.clock.Now().Add(time.Minute)
	record(ids[1], request.DeliveryAttempting, 0, time.Time{}, "local")
	record(ids[2], request.DeliveryAttempting, 0, later, "local")
	record(ids[4], "retrying", 0, later, "local")
	record(ids[5], "failed", 0, time.Time{}, "local")
	record(ids[7], "uncertain", 0, time.Time{}, "local")
	record(ids[0], "delivered", 0, time.Time{}, "hook")
	record(ids[8], "delivered", 0, time.Time{}, "local")
	sameCounts(t, e, "after the first delivery records")
	record(ids[1], "delivered", 1, time.Time{}, "local")
	record(ids[2], request.DeliveryAttempting, 1, time.Time{}, "local") // the lookup's call
	record(ids[4], "failed", 1, time.Time{}, "local")
	record(ids[10], "retrying", 0, later, "elsewhere") // recorded under another target
	sameCounts(t, e, "after transitions")
	if err := e.l.Redrive(ctx, ids[5]); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Resolve(ctx, ids[7], true, "EXT-1"); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, e, "after a redrive and a resolve")
	// A fingerprinted create and its occurrence (a comment on its
	// ticket), a comment parked on an undelivered create, a request
	// committed with an earlier acceptance time (another host's claim),
	// and a delivery record mirrored from the cluster record.
	first, err := e.l.Group(ctx, fingerprinted("fp-1", "checkout-500"), request.Grouping{Window: time.Hour, Comments: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Group(ctx, fingerprinted("fp-2", "checkout-500"), request.Grouping{Window: time.Hour, Comments: true}); err != nil {
		t.Fatal(err)
	}
	c := ticket.Request{RequestID: "cmt-1", Tool: "add_comment", Target: "local", Body: "again", Action: ticket.Action{On: "fp-1"}}
	if err := c.NormalizeComment(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if parked, err := e.l.Park(ctx, "cmt-1"); err != nil || !parked {
		t.Fatalf("Park(cmt-1) = %v, %v; want parked", parked, err)
	}
	early := newRequest("claimed-earlier")
	if _, err := e.l.CreateAt(ctx, early, early.Hash(), e.clock.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, e, "after grouping, parking and a request accepted out of order")
	if n := fixture.Count(t, fixture.Raw(t, e.path), `SELECT count(*) FROM requests_late`); n != 1 {
		t.Fatalf("%d requests accepted out of order, want 1 (claimed-earlier)", n)
	}
	if err := e.l.MirrorDelivery(ctx, request.Delivery{RequestID: first.RequestID, Target: "local", State: "delivered", Attempts: 1, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.l.MirrorDelivery(ctx, request.Delivery{RequestID: early.Scoped(), Target: "local", State: "retrying", Attempts: 1, Version: 1, NextAttemptAt: later}); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, e, "after mirrored delivery records (the create's settles its parked comment)")
	e.clock.Add(48 * time.Hour)
	if _, err := e.l.Prune(ctx, e.clock.Now(), 100); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, e, "after retention")
	if c := keptCounts(t, e); c["local/delivered"] != 0 || c["hook/delivered"] != 0 || c["local/failed"] != 0 || c["hook/waiting"] != 3 {
		t.Fatalf("after retention: %v; want the delivered and failed ones gone", c)
	}
}

// BenchmarkCountsOnWrite: accepting and delivering requests from 32
// goroutines, alternated round by round across what the ledger keeps on
// write for the console: the counts' triggers (0153) and the lists'
// indexes (0156), each with and without the other; and the counts kept
// by the writer instead, one upsert per target and status per group
// commit, stood in for by a job that joins every batch with four upserts
// (run with -bench CountsOnWrite -benchtime 1x). It reports each variant's median round:
// writes a second, and the process CPU per write; a median, since the
// box's other work comes and goes within a run.
func BenchmarkCountsOnWrite(b *testing.B) {
	const n, rounds = 3000, 7
	counts := []string{"DROP TRIGGER request_counts_request_in", "DROP TRIGGER request_counts_request_out",
		"DROP TRIGGER request_counts_request_target", "DROP TRIGGER request_counts_delivery_in",
		"DROP TRIGGER request_counts_delivery_change", "DROP TRIGGER request_counts_delivery_out"}
	lists := []string{"DROP TRIGGER list_index_request_in", "DROP TRIGGER list_index_request_out",
		"DROP TRIGGER list_index_request_target", "DROP TRIGGER list_index_delivery_in", "DROP TRIGGER list_index_delivery_out",
		"DROP INDEX requests_subject", "DROP INDEX requests_target", "DROP INDEX requests_fingerprint"}
	variants := []struct {
		name    string
		drop    []string
		batched bool
	}{
		{"counts+lists", nil, false},
		{"counts", lists, false},
		{"lists", counts, false},
		{"none", slices.Concat(counts, lists), false},
		{"writer", slices.Concat(counts, lists), true},
	}
	rate, cpu := make([][]float64, len(variants)), make([][]float64, len(variants))
	for round := range len(variants) * rounds {
		v := round % len(variants)
		l, w, done := roundLedger(b, variants[v].drop)
		stop := make(chan struct{})
		var batches sync.WaitGroup
		if variants[v].batched {
			batches.Go(func() { upsertEveryBatch(b, w, stop) })
		}
		reqs := benchRequests(b, n)
		for i := range reqs {
			reqs[i].RequestID = fmt.Sprintf("r%d-%s", round, reqs[i].RequestID)
		}
		start, cpuStart := time.Now(), processCPU(b)
		createConcurrently(b, l, 32, reqs, false)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					id := reqs[i].RequestID
					if err := l.RecordDelivery(context.Background(), request.Delivery{RequestID: id, Target: "local", State: request.DeliveryAttempting, Attempts: 1}); err != nil {
						b.Error(err)
						return
					}
					if err := l.RecordDelivery(context.Background(), request.Delivery{RequestID: id, Target: "local", State: "delivered", Attempts: 1, Version: 1, ExternalID: "x"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		batches.Wait()
		rate[v] = append(rate[v], float64(3*n)/time.Since(start).Seconds())
		cpu[v] = append(cpu[v], float64((processCPU(b)-cpuStart).Microseconds())/float64(3*n))
		done()
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	for v, variant := range variants {
		b.ReportMetric(median(rate[v]), "writes/s-"+variant.name)
		b.ReportMetric(median(cpu[v]), "cpu-µs/write-"+variant.name)
	}
}

// upsertEveryBatch submits, until stop, a job of four upserts of the
// counts, the next as soon as the last committed: one joins each group
// commit, as counts the writer kept per batch would.
func upsertEveryBatch(b *testing.B, w *sqlitedb.Writer, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		err := w.InTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			for _, shown := range []string{"waiting", "attempting", "delivered", "retrying"} {
				if _, err := tx.ExecContext(ctx, `INSERT INTO request_counts (target, shown, n) VALUES ('local', ?, 1)
					ON CONFLICT (target, shown) DO UPDATE SET n = n + excluded.n`, shown); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Error(err)
			return
		}
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The copy's counts kept on write equal a count over the whole copy after
// each kind of fold: records claimed, accepted, every delivery record
// state, a stale write arriving late, a deleted record and a prune; and
// ClusterCounts reports them by target (a claimed record is no target's).
func TestClusterCountsKeptOnWrite(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	scan := func() map[string]int {
		return countRows(t, e, `SELECT target, CASE WHEN state IS NULL AND phase = 'accepted' THEN 'waiting'
				WHEN state IS NULL THEN 'claimed' WHEN state = 'attempting' AND next_attempt_at IS NOT NULL THEN 'retrying' ELSE state END, count(*)
			FROM cluster_requests GROUP BY 1, 2`)
	}
	kept := func() map[string]int {
		return countRows(t, e, `SELECT target, shown, n FROM cluster_counts WHERE n != 0`)
	}
	fold := func(when string, upTo uint64, recs ...request.CopiedRecord) {
		t.Helper()
		if err := e.l.FoldRecords(ctx, recs, upTo); err != nil {
			t.Fatal(err)
		}
		if want, got := scan(), kept(); fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("%s: the copy's counts kept on write %v; the copy holds %v", when, got, want)
		}
	}
	claimed := clusterRec(0, "host-a", "", 0, 1)
	claimed.Phase = "claimed"
	var recs []request.CopiedRecord
	for i := 1; i <= 20; i++ {
		recs = append(recs, clusterRec(i, "host-a", "", 0, uint64(i+1)))
	}
	fold("claimed and accepted", 21, append(recs, claimed)...)
	pending := clusterRec(5, "host-b", request.DeliveryAttempting, 1, 24)
	pending.Delivery.NextAttemptAt = time.Unix(1_800_000_000, 0)
	fold("delivery records", 30, clusterRec(1, "host-b", request.DeliveryAttempting, 1, 22), clusterRec(2, "host-a", "retrying", 1, 23), pending,
		clusterRec(3, "host-a", "failed", 3, 25), clusterRec(4, "host-b", "uncertain", 1, 26), clusterRec(6, "host-a", "delivered", 1, 27),
		clusterRec(8, "host-b", "delivered", 1, 28))
	fold("a stale write and a settled one", 32, clusterRec(6, "host-a", "", 0, 3), clusterRec(1, "host-b", "delivered", 2, 31))
	claimed.Phase, claimed.Rev = "accepted", 33
	fold("a claim accepted", 33, claimed)
	fold("a deleted record", 34, request.CopiedRecord{Key: clusterRec(3, "", "", 0, 0).Key, Deleted: true})
	if _, err := e.l.PruneClusterCopy(ctx, 10, 0, 100); err != nil {
		t.Fatal(err)
	}
	if want, got := scan(), kept(); fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("after a prune: the copy's counts kept on write %v; the copy holds %v", got, want)
	}

	// Left: hook (even) 0 accepted-then, 2 retrying, 4 uncertain, 6 and 8
	// delivered, 10..20 waiting; chat (odd) 1 delivered, 5 retrying,
	// 9..19 waiting; records 7 (rev 8) and below rev 10 without a later
	// write were pruned: 0 (rev 33) stays.
	s, err := e.l.ClusterCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.TargetCounts{}
	for _, tc := range s.Targets {
		tc.Served = false
		got[tc.Target] = tc
	}
	want := map[string]ledger.TargetCounts{
		"hook": {Target: "hook", Waiting: 7, Retrying: 1, Uncertain: 1, Delivered: 2},
		"chat": {Target: "chat", Waiting: 6, Retrying: 1, Delivered: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ClusterCounts: %+v, want %+v", got, want)
	}
}

// BenchmarkClusterCountsOnFold: folding records into the copy as the
// copy does (batches of 5,000: a record accepted, then its delivery
// record, then delivered) with the copy's count triggers against the same
// copy without them, alternated round by round (run with -bench
// ClusterCountsOnFold -benchtime 1x).
func BenchmarkClusterCountsOnFold(b *testing.B) {
	const n, batch, rounds = 50_000, 5000, 3
	var took [2]time.Duration // kept, dropped
	for round := range 2 * rounds {
		dropped := round%2 == 1
		var triggers []string
		if dropped {
			triggers = []string{"DROP TRIGGER cluster_counts_in", "DROP TRIGGER cluster_counts_change", "DROP TRIGGER cluster_counts_out"}
		}
		l, _, done := roundLedger(b, triggers)
		start := time.Now()
		var rev uint64
		for version, state := range []string{"", request.DeliveryAttempting, "delivered"} {
			for lo := 0; lo < n; lo += batch {
				recs := make([]request.CopiedRecord, 0, batch)
				for i := lo; i < lo+batch; i++ {
					rev++
					recs = append(recs, clusterRec(i, "host-a", state, int64(version), rev))
				}
				if err := l.FoldRecords(context.Background(), recs, rev); err != nil {
					b.Fatal(err)
				}
			}
		}
		took[map[bool]int{false: 0, true: 1}[dropped]] += time.Since(start)
		done()
	}
	b.ReportMetric(float64(3*n*rounds)/took[0].Seconds(), "records/s-kept")
	b.ReportMetric(float64(3*n*rounds)/took[1].Seconds(), "records/s-without")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio")
}

// roundLedger is a new ledger for one round of a benchmark, after the
// statements drop (dropping triggers, indexes); done closes it.
func roundLedger(b *testing.B, drop []string) (l *ledger.Ledger, w *sqlitedb.Writer, done func()) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "tickets.db")
	db, err := store.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	w = sqlitedb.NewWriter(db, discard(), metrics.NewFront(prometheus.NewRegistry()).Writer)
	for _, stmt := range drop {
		if _, err := fixture.Raw(b, path).Exec(stmt); err != nil {
			b.Fatal(err)
		}
	}
	return ledger.New(db, w, time.Now), w, func() { w.Close(); db.Close() }
}
