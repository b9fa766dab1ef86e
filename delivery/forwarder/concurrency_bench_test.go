package forwarder

import (
	"context"
	"sync"
	"testing"
	"time"
)

// BenchmarkAdaptiveBelowTheWorkers is 64 workers taking turns under a
// limit of 16, as an API target's are until its limit climbs (GitHub's
// stays there): the cost of a place taken and given back while 48 wait.
func BenchmarkAdaptiveBelowTheWorkers(b *testing.B) {
	a := newAdaptive(16, 16, time.Now, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	per := b.N/64 + 1
	b.ResetTimer()
	for range 64 {
		wg.Go(func() {
			for range per {
				c, ok := a.acquire(ctx)
				if !ok {
					b.Error("acquire failed")
					return
				}
				c.release()
			}
		})
	}
	wg.Wait()
}
