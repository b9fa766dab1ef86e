package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// benchLedger opens a durable ledger (WAL, synchronous=FULL: the defaults)
// on a fresh file.
func benchLedger(b *testing.B) (*ledger.Ledger, *metrics.Writer) {
	b.Helper()
	m := metrics.NewFront(prometheus.NewRegistry()).Writer
	return fixture.NewLedger(b, fixture.WriterMetrics(m)).Ledger, m
}

// benchRequests are n normalized requests shaped like an agent's ticket.
func benchRequests(b *testing.B, n int) []ticket.Request {
	b.Helper()
	reqs := make([]ticket.Request, n)
	for i := range reqs {
		reqs[i] = ticket.Request{
			RequestID: fmt.Sprintf("bench-%d-%016x", i, uint64(i)*0x9e3779b97f4a7c15),
			Tool:      "create_ticket", Target: "local",
			Title:    fmt.Sprintf("Nightly export failed on worker-%d", i%7),
			Body:     "The nightly export job failed with `context deadline exceeded` after 30 minutes.\n\nSee run 4711.",
			Priority: "high", Labels: []string{"nightly", "export"},
		}
		if err := reqs[i].Normalize(); err != nil {
			b.Fatal(err)
		}
	}
	return reqs
}

// opsPerCommit is the achieved group-commit batch size.
func opsPerCommit(b *testing.B, m *metrics.Writer) float64 {
	b.Helper()
	var d dto.Metric
	if err := m.BatchSize.Write(&d); err != nil {
		b.Fatal(err)
	}
	h := d.GetHistogram()
	if h.GetSampleCount() == 0 {
		return 0
	}
	return h.GetSampleSum() / float64(h.GetSampleCount())
}

// createConcurrently runs reqs through l.Create from n goroutines.
func createConcurrently(b *testing.B, l *ledger.Ledger, n int, reqs []ticket.Request, wantReplayed bool) {
	concurrently(b, n, reqs, func(r ticket.Request) error {
		res, err := l.Create(context.Background(), r)
		if err == nil && res.Replayed != wantReplayed {
			err = fmt.Errorf("%s: replayed = %v", r.RequestID, res.Replayed)
		}
		return err
	})
}

// concurrently hands reqs to call from n goroutines; the first error of
// each goroutine fails the benchmark and stops that goroutine.
func concurrently(b *testing.B, n int, reqs []ticket.Request, call func(ticket.Request) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(reqs)) {
					return
				}
				if err := call(reqs[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkCreate is the durable write path: N goroutines calling
// Ledger.Create at once, as N MCP sessions do, so the writer's group commit
// batches up to N operations per fsync. ns/op is wall time per create
// (1/throughput); ops/commit is the achieved batch size from metrics.Writer.
func BenchmarkCreate(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l, m := benchLedger(b)
			reqs := benchRequests(b, b.N)
			b.ResetTimer()
			createConcurrently(b, l, n, reqs, false)
			b.StopTimer()
			b.ReportMetric(opsPerCommit(b, m), "ops/commit")
		})
	}
}

// BenchmarkCreateReplay is a repeat of committed requests: the writer finds
// the row inside its transaction and writes nothing.
func BenchmarkCreateReplay(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l, _ := benchLedger(b)
			reqs := benchRequests(b, min(b.N, 10_000))
			createConcurrently(b, l, 64, reqs, false)
			replays := make([]ticket.Request, b.N)
			for i := range replays {
				replays[i] = reqs[i%len(reqs)]
			}
			b.ResetTimer()
			createConcurrently(b, l, n, replays, true)
		})
	}
}

// BenchmarkPriorDeliveries is the forwarder's read ahead: one query for a
// pull's worth of tickets, half of them with a delivery record (a backlog
// after a downstream outage). ns/op and allocs/op are per ticket read.
func BenchmarkPriorDeliveries(b *testing.B) {
	l, _ := benchLedger(b)
	ctx := context.Background()
	reqs := benchRequests(b, 1024)
	createConcurrently(b, l, 64, reqs, false)
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.RequestID
		if i%2 == 0 {
			d := request.Delivery{RequestID: r.RequestID, Target: r.Target, State: string(request.StatusRetrying), Attempts: 1}
			if err := l.RecordDelivery(ctx, d); err != nil {
				b.Fatal(err)
			}
		}
	}
	const batch = 16
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		at := i % len(ids)
		ps, errs, err := l.PriorDeliveries(ctx, ids[at:at+batch])
		if err != nil {
			b.Fatal(err)
		}
		for j, p := range ps {
			if errs[j] != nil || !p.Accepted {
				b.Fatalf("%s: %+v, %v", ids[at+j], p, errs[j])
			}
		}
	}
}

// BenchmarkGroupOccurrence is scenario 13's write: 32 goroutines report
// one of 8 open fingerprints under fresh request ids, each an occurrence
// comment with its outbox row. cpu-µs/op is the process's CPU per report.
func BenchmarkGroupOccurrence(b *testing.B) {
	l, m := benchLedger(b)
	g := request.Grouping{Window: time.Hour, Comments: true}
	reqs := benchRequests(b, b.N+8)
	for i := range reqs {
		reqs[i].Fingerprint = fmt.Sprintf("bench-%d", i%8)
	}
	for _, r := range reqs[:8] {
		if _, err := l.Group(context.Background(), r, g); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu := processCPU(b)
	concurrently(b, 32, reqs[8:], func(r ticket.Request) error {
		res, err := l.Group(context.Background(), r, g)
		if err == nil && !res.Grouped {
			err = fmt.Errorf("%s: not grouped", r.RequestID)
		}
		return err
	})
	cpu = processCPU(b) - cpu
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(opsPerCommit(b, m), "ops/commit")
}
