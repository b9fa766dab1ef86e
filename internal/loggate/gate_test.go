package loggate

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestGateBounded: a gate never remembers more than its bound, however
// many keys (client addresses) come.
func TestGateBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	g := New(time.Minute, 100, clock)
	for i := range 5000 {
		g.Pass(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	if n := g.Len(); n > 100 {
		t.Errorf("%d log gates, bound 100", n)
	}
}

// TestGateStaysBounded: at capacity (a flood from many addresses) a new key
// is admitted and one old key makes room. What that costs is measured by
// BenchmarkGateNewKey, not asserted here.
func TestGateStaysBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	const limit = 100
	g := New(Every, limit, clock)
	for i := range limit + 50 {
		k := "k" + strconv.Itoa(i)
		g.Pass(k)
		if inG, ng := g.Holds(k), g.Len(); !inG || ng > limit {
			t.Fatalf("key %d: in log gate %v; size %d, limit %d", i, inG, ng, limit)
		}
	}
}

// BenchmarkGateNewKey: one new key below capacity and at capacity (10,000
// keys held, the HTTP limiters' bound).
func BenchmarkGateNewKey(b *testing.B) {
	const held = 10_000
	for _, c := range []struct {
		name  string
		limit int
	}{{"below_capacity", 1 << 30}, {"at_capacity", held}} {
		b.Run(c.name, func(b *testing.B) {
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { return now }
			g := New(Every, c.limit, clock)
			for i := range held {
				g.Pass("k" + strconv.Itoa(i))
			}
			i := 0
			for b.Loop() {
				g.Pass("n" + strconv.Itoa(i))
				i++
			}
		})
	}
}
