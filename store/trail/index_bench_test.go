package trail_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/store/trail"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// BenchmarkCreateWithTrailIndex is mcp-front's create_ticket with the
// trail on, as it runs in the front: 32 sessions each committing a create
// through the ledger's group commit and recording its entry, the trail's
// batches joining the same group commit (decision 0145), with the request
// index against without it (its trigger dropped), alternated round by
// round on one file whose trail already holds 1,000,000 entries, so that
// each new index row lands in a large index as it does in production
// (run with -bench CreateWithTrailIndex -benchtime 1x).
func BenchmarkCreateWithTrailIndex(b *testing.B) {
	for _, prefill := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("prefill=%d", prefill), func(b *testing.B) { createWithTrailIndex(b, prefill) })
	}
}

func createWithTrailIndex(b *testing.B, prefill int) {
	const sessions, n, rounds = 32, 3000, 10
	f := fixture.NewLedger(b)
	s, err := trail.Open(context.Background(), f.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if prefill > 0 {
		fillMillion(b, s, prefill, "")
	}
	raw := fixture.Raw(b, f.Path)
	var trigger string
	if err := raw.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'trail_index'`).Scan(&trigger); err != nil {
		b.Fatal(err)
	}
	var took [2]time.Duration // indexed, without
	for round := range 2 * rounds {
		without := round%2 == 1
		toggle := trigger
		if without {
			toggle = `DROP TRIGGER trail_index`
		}
		if _, err := raw.Exec(toggle); err != nil && round > 0 {
			b.Fatal(err)
		}
		w := trail.NewWriter(s, trail.WriterConfig{Commit: f.Writer}, fixture.Discard(), time.Now, prometheus.NewRegistry())
		reqs := make([]ticket.Request, n)
		for i := range reqs {
			reqs[i] = ticket.Request{RequestID: fmt.Sprintf("bench-%d-%d", round, i), Tool: "create_ticket", Target: "local",
				Title: fmt.Sprintf("Nightly export failed on worker-%d", i%7), Body: "The nightly export job failed.", Priority: "high"}
			if err := reqs[i].Normalize(); err != nil {
				b.Fatal(err)
			}
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range sessions {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					ctx := context.Background()
					res, err := f.Create(ctx, reqs[i])
					if err != nil {
						b.Error(err)
						return
					}
					_ = w.Record(ctx, trail.Entry{Time: time.Now(), Kind: trail.KindCall, Subject: "agent", Client: "bench", Tool: "create_ticket",
						RequestID: ticket.ScopedID("", reqs[i].RequestID), Outcome: trail.Accepted, TicketID: res.TicketID})
				}
			})
		}
		wg.Wait()
		took[map[bool]int{false: 0, true: 1}[without]] += time.Since(start)
		w.Close() // its last batch written before the trigger changes
		id := ticket.ScopedID("", reqs[n-1].RequestID)
		if got, err := s.Query(context.Background(), trail.Filter{Subject: "agent", Since: start}); err != nil || len(got) != n {
			b.Fatalf("round %d: the trail holds %d of its %d entries (%v)", round, len(got), n, err)
		}
		if got, _ := s.ForRequest(context.Background(), id); (len(got) == 1) == without {
			b.Fatalf("round %d (without the index: %v): ForRequest(%s) found %d entries", round, without, id, len(got))
		}
	}
	b.ReportMetric(float64(n*rounds)/took[0].Seconds(), "creates/s-indexed")
	b.ReportMetric(float64(n*rounds)/took[1].Seconds(), "creates/s-without")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio")
}

// fillMillion appends total entries in batches of 50, each call to a
// request of its own but watched's (when not ""), which has one entry at
// the start, a third in and two thirds in.
func fillMillion(b *testing.B, s *trail.Store, total int, watched string) {
	const batch = 50
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	start := time.Now()
	for i := 0; i < total; i += batch {
		entries := make([]trail.Entry, batch)
		for j := range entries {
			id := fmt.Sprintf("agent:req-%d", i+j)
			if k := i / batch; watched != "" && j == 0 && (k == 0 || k == total/batch/3 || k == 2*total/batch/3) {
				id = watched
			}
			entries[j] = call(t0.Add(time.Duration(i+j)*time.Millisecond), "agent", "create_ticket", id, trail.Accepted)
		}
		if _, err := s.Append(context.Background(), entries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(time.Since(start).Seconds(), "fill-s")
}

// BenchmarkForRequestMillion reads one request's entries on a trail of
// 1,000,000 entries (batches of 50, a request of its own per call, a
// request with three entries far apart), through the index, and once by
// the scan of every batch ForRequest used before (run with -bench
// ForRequestMillion -benchtime 1x).
func BenchmarkForRequestMillion(b *testing.B) {
	const total = 1_000_000
	s, path := openStore(b)
	ctx := context.Background()
	fillMillion(b, s, total, "agent:watched")
	var lat []time.Duration
	for range 200 {
		id := fmt.Sprintf("agent:req-%d", rand.IntN(total))
		t := time.Now()
		got, err := s.ForRequest(ctx, id)
		lat = append(lat, time.Since(t))
		if err != nil || len(got) > 1 {
			b.Fatalf("ForRequest(%s): %d entries, %v", id, len(got), err)
		}
	}
	t := time.Now()
	got, err := s.ForRequest(ctx, "agent:watched")
	watched := time.Since(t)
	if err != nil || len(got) != 3 {
		b.Fatalf("ForRequest(watched): %+v, %v", got, err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(watched.Microseconds())/1000, "three-far-apart-ms")
	t = time.Now()
	if _, err := s.Query(ctx, trail.Filter{Subject: "nobody"}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(t).Microseconds())/1000, "scan-ms")

	// What the index adds to storing a batch, in the transaction (the
	// part that holds the write lock the creates need): batches of 50
	// appended to this trail with the index's trigger and without it,
	// alternated 20 times.
	raw := fixture.Raw(b, path)
	var trigger string
	if err := raw.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'trail_index'`).Scan(&trigger); err != nil {
		b.Fatal(err)
	}
	var took [2]time.Duration
	next := total
	for round := range 40 {
		without := round%2 == 1
		toggle := map[bool]string{false: trigger, true: `DROP TRIGGER trail_index`}[without]
		if _, err := raw.Exec(toggle); err != nil && round > 0 {
			b.Fatal(err)
		}
		start := time.Now()
		for range 50 {
			entries := make([]trail.Entry, 50)
			for j := range entries {
				entries[j] = call(time.Now(), "agent", "create_ticket", fmt.Sprintf("agent:req-%d", next), trail.Accepted)
				next++
			}
			if _, err := s.Append(ctx, entries); err != nil {
				b.Fatal(err)
			}
		}
		took[map[bool]int{false: 0, true: 1}[without]] += time.Since(start)
	}
	perEntry := func(d time.Duration) float64 { return float64(d.Microseconds()) / (20 * 50 * 50) }
	b.ReportMetric(perEntry(took[0]), "append-µs/entry-indexed")
	b.ReportMetric(perEntry(took[1]), "append-µs/entry-without")
}
