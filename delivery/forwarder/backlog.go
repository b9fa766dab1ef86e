package forwarder

import (
	"sync"
	"time"
)

// BacklogPending is how many messages a pull must leave behind it in a
// target's consumer for the forwarder to be draining a backlog
// (Config.Backlog): about a fifth of a second of a fast target's work.
const BacklogPending = 1000

// backlogHold is how long the forwarder counts as draining after the last
// pull that left a backlog: a target held by a long Retry-After pulls
// nothing, and stops counting once this has passed.
const backlogHold = time.Second

// backlogWatch tells Config.Backlog when the forwarder starts and stops
// draining a backlog.
type backlogWatch struct {
	report func(draining bool, pending uint64)

	mu       sync.Mutex
	lastHigh time.Time // the last pull that left BacklogPending or more
	on       bool
}

// pulled hears how many messages a pull left in its consumer.
func (b *backlogWatch) pulled(pending uint64, now time.Time) {
	if pending < BacklogPending {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastHigh = now
	if !b.on {
		b.on = true
		b.report(true, pending)
	}
}

// check ends the draining once backlogHold has passed without a pull that
// left a backlog, or at once with stop.
func (b *backlogWatch) check(now time.Time, stop bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.on && (stop || now.Sub(b.lastHigh) >= backlogHold) {
		b.on = false
		b.report(false, 0)
	}
}

// run checks every quarter of backlogHold until done is closed, then ends
// the draining.
func (b *backlogWatch) run(done <-chan struct{}, now func() time.Time) {
	tick := time.NewTicker(backlogHold / 4)
	defer tick.Stop()
	for {
		select {
		case <-done:
			b.check(now(), true)
			return
		case <-tick.C:
			b.check(now(), false)
		}
	}
}
