package natsjs_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"ticketrelay/delivery/natsjs"
)

// BenchmarkPublishBatch compares the ways the publisher sends a batch to a
// SyncAlways file stream: one async publish per message (one fsync each) or
// one atomic batch (one coalesced fsync, plus the server's staging store),
// staged in the store on disk or, as the dispatcher does, in memory. The
// CPU figure is the whole process's, the embedded server's included: at
// moderate rates batches are small and the machine's CPU, not the wait for
// the fsync, is what a ticket's lag queues on.
func BenchmarkPublishBatch(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 4, 5, 8, 16, 64} {
		for _, mode := range []string{"each", "atomic", "atomic-memory"} {
			atomic := mode != "each"
			if atomic && n == 1 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				store := b.TempDir()
				_, js := connect(b, start(b, store))
				if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
					b.Fatal(err)
				}
				if mode == "atomic-memory" {
					mem, err := natsjs.MemoryStageDir(natsjs.DefaultStageRoot, store)
					if err != nil || mem == "" {
						b.Skipf("no memory filesystem at %s: %v", natsjs.DefaultStageRoot, err)
					}
					b.Cleanup(func() { os.RemoveAll(mem) })
					if err := natsjs.StageBatchesIn(store, "TICKETS", mem); err != nil {
						b.Fatal(err)
					}
				}
				var opts []natsjs.PublisherOption
				if atomic {
					opts = append(opts, natsjs.AtomicBatches(func(err error) { b.Fatalf("fallback: %v", err) }), natsjs.MinAtomicBatch(2))
				}
				pub := natsjs.NewPublisher(js, opts...)
				payload := make([]byte, 80) // a ticket.Ref with a UUID request id
				round := 0
				cpu0 := processCPU()
				b.ResetTimer()
				for b.Loop() {
					round++
					for _, r := range pub.Publish(ctx, numbered(fmt.Sprint("r", round), n, payload)) {
						if r.Err != nil || r.Duplicate {
							b.Fatalf("publish: %+v", r)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/msg")
				if cpu := processCPU() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/msg")
				}
			})
		}
	}
}
