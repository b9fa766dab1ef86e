// Package testwait is how tests wait: on a condition, with a deadline, never
// a bare sleep. It polls on a ticker so a test reacts within a few
// milliseconds of the condition turning true and fails with a message that
// says what it waited for.
package testwait

import (
	"testing"
	"time"
)

// Interval is how often conditions are polled.
const Interval = 10 * time.Millisecond

// For polls cond until it holds, or fails t after timeout.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Until polls cond until it holds (true) or timeout passes (false).
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// Holds checks that cond stays true for the whole of d (an absence of
// change: nothing may happen in that window), failing t at the first poll
// where it does not.
func Holds(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		select {
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}
