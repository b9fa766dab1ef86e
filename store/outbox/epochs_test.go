package outbox

import "testing"

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// The channel of an ended epoch closes when the last batch that began in it
// leaves, whatever began after.
func TestEpochsWaitForTheBatchesBegunBefore(t *testing.T) {
	var e epochs
	if !closed(e.end()) {
		t.Fatal("nothing in flight, yet the end is not done")
	}
	a, b := e.enter(), e.enter()
	first := e.end()
	c := e.enter()
	second := e.end()
	e.leave(a)
	if closed(first) {
		t.Fatal("done with one of its two batches in flight")
	}
	e.leave(b)
	if !closed(first) {
		t.Fatal("not done once both batches left")
	}
	if closed(second) {
		t.Fatal("a later epoch is done with its batch in flight")
	}
	e.leave(c)
	if !closed(second) {
		t.Fatal("the later epoch is not done once its batch left")
	}
}
