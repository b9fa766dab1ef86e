package natsjs_test

import (
	"context"
	"fmt"
	"testing"

	"ticketrelay/natsjs"
	"ticketrelay/outbox"
)

// BenchmarkPublishBatch compares the two ways the publisher sends a batch to
// a SyncAlways file stream: one atomic batch (one coalesced fsync, plus the
// server's staging store) or one async publish per message (one fsync each).
func BenchmarkPublishBatch(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 4, 8, 16, 64} {
		for _, atomic := range []bool{false, true} {
			if atomic && n == 1 {
				continue
			}
			mode := "each"
			if atomic {
				mode = "atomic"
			}
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				_, js := connect(b, start(b, b.TempDir()))
				if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
					b.Fatal(err)
				}
				var opts []natsjs.PublisherOption
				if atomic {
					opts = append(opts, natsjs.AtomicBatches(func(err error) { b.Fatalf("fallback: %v", err) }), natsjs.MinAtomicBatch(2))
				}
				pub := natsjs.NewPublisher(js, opts...)
				payload := make([]byte, 700)
				id := 0
				b.ResetTimer()
				for b.Loop() {
					msgs := make([]outbox.Message, n)
					for i := range msgs {
						id++
						msgs[i] = outbox.Message{RequestID: fmt.Sprint("r", id), Subject: "tickets.local", Payload: payload}
					}
					for _, r := range pub.Publish(ctx, msgs) {
						if r.Err != nil || r.Duplicate {
							b.Fatalf("publish: %+v", r)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/msg")
			})
		}
	}
}
