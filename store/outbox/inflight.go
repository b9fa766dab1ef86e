package outbox

import (
	"cmp"
	"context"
	"sync"
)

// inflight runs up to depth batches at once and keeps their first error.
type inflight struct {
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	first error
}

func newInflight(depth int) *inflight { return &inflight{slots: make(chan struct{}, depth)} }

// start runs fn once a slot is free (or not at all if ctx ends first).
func (f *inflight) start(ctx context.Context, fn func() error) {
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	f.wg.Go(func() {
		defer func() { <-f.slots }()
		if err := fn(); err != nil {
			f.mu.Lock()
			f.first = cmp.Or(f.first, err)
			f.mu.Unlock()
		}
	})
}

// idle reports whether no batch is in flight.
func (f *inflight) idle() bool { return len(f.slots) == 0 }

// err takes the first error of the batches finished so far.
func (f *inflight) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.first
	f.first = nil
	return err
}

// drain waits for every batch in flight and takes the first error.
func (f *inflight) drain() error {
	f.wg.Wait()
	return f.err()
}
