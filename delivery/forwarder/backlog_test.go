package forwarder

import (
	"slices"
	"testing"
	"time"
)

// The watch reports a backlog once when a pull leaves BacklogPending or
// more behind it, and its end once backlogHold has passed without another,
// or at a stop.
func TestBacklogWatch(t *testing.T) {
	var seen []bool
	b := &backlogWatch{report: func(on bool, _ uint64) { seen = append(seen, on) }}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.pulled(BacklogPending-1, t0)
	b.check(t0, false)
	if len(seen) != 0 {
		t.Fatalf("reports %v for a pull that left %d behind, want none", seen, BacklogPending-1)
	}
	b.pulled(BacklogPending, t0)
	b.pulled(5*BacklogPending, t0.Add(backlogHold/2))
	b.check(t0.Add(backlogHold), false) // half a hold after the last high pull
	if !slices.Equal(seen, []bool{true}) {
		t.Fatalf("reports %v while pulls leave a backlog, want [true]", seen)
	}
	b.pulled(10, t0.Add(backlogHold))
	b.check(t0.Add(backlogHold/2+backlogHold), false)
	if !slices.Equal(seen, []bool{true, false}) {
		t.Fatalf("reports %v a hold after the last pull that left a backlog, want [true false]", seen)
	}
	b.check(t0.Add(10*backlogHold), true)
	b.pulled(BacklogPending, t0.Add(11*backlogHold))
	b.check(t0.Add(11*backlogHold), true)
	if !slices.Equal(seen, []bool{true, false, true, false}) {
		t.Errorf("reports %v after a second backlog ended by a stop, want [true false true false]", seen)
	}
}
