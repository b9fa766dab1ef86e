package forwarder

import (
	"context"
	"errors"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/testkit/testwait"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func throttled(after time.Duration) error {
	return &downstream.Error{Class: downstream.Transient, Throttled: true, StatusCode: 429, RetryAfter: after, Err: errors.New("slow down")}
}

// take acquires n places, failing if one is not free at once.
func take(t *testing.T, a *adaptive, n int) []*call {
	t.Helper()
	var out []*call
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		c, ok := a.acquire(ctx)
		cancel()
		if !ok {
			lim, in, _ := a.snapshot()
			t.Fatalf("no place free after %d of %d (limit %d, %d in flight)", len(out), n, lim, in)
		}
		out = append(out, c)
	}
	return out
}

// blocked reports whether acquire waits (for 20 ms of real time).
func blocked(a *adaptive) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c, ok := a.acquire(ctx)
	if ok {
		c.release()
	}
	return !ok
}

func limitOf(a *adaptive) int { l, _, _ := a.snapshot(); return l }

// The limit starts at the workers and holds calls beyond it until one ends.
func TestAdaptiveHoldsCallsOverTheLimit(t *testing.T) {
	clk := newFakeClock()
	var seen []int
	a := newAdaptive(4, 4, clk.now, func(n int) { seen = append(seen, n) })
	calls := take(t, a, 4)
	if !blocked(a) {
		t.Fatal("a fifth call got a place under a limit of 4")
	}
	calls[0].done(nil)
	take(t, a, 1)
	if len(seen) != 1 || seen[0] != 4 {
		t.Errorf("gauge saw %v, want [4]", seen)
	}
}

// A 429 halves the limit once for the calls that were out together, again
// for a call started after that, never below 1; answered calls climb back
// one call per round trip of the limit, up to the workers.
func TestAdaptiveHalvesOnThrottleAndClimbsBack(t *testing.T) {
	clk := newFakeClock()
	var gauge int
	a := newAdaptive(16, 16, clk.now, func(n int) { gauge = n })
	out := take(t, a, 16)
	clk.add(10 * time.Millisecond)
	for _, c := range out[:8] {
		c.done(throttled(0))
	}
	if got := limitOf(a); got != 8 {
		t.Fatalf("limit %d after one wave of 429s, want 8", got)
	}
	for _, c := range out[8:] {
		c.release()
	}
	for want := 4; want >= 1; want /= 2 {
		clk.add(time.Millisecond)
		c := take(t, a, 1)[0]
		clk.add(time.Millisecond)
		c.done(throttled(0))
		if got := limitOf(a); got != want {
			t.Fatalf("limit %d after another 429, want %d", got, want)
		}
	}
	clk.add(time.Millisecond)
	c := take(t, a, 1)[0]
	c.done(throttled(0))
	if got := limitOf(a); got != 1 || gauge != 1 {
		t.Fatalf("limit %d (gauge %d) below its floor, want 1", got, gauge)
	}
	// Climbing back: from 1 to 16 takes about 1+2+…+15 answered calls.
	n := 0
	for limitOf(a) < 16 {
		c := take(t, a, 1)[0]
		clk.add(5 * time.Millisecond)
		c.done(nil)
		if n++; n > 200 {
			t.Fatalf("limit %d after %d answered calls, want back at 16", limitOf(a), n)
		}
	}
	if n < 100 || gauge != 16 {
		t.Errorf("limit back at 16 after %d answered calls (gauge %d), want about 120 and 16", n, gauge)
	}
}

// A 429's Retry-After pauses the whole target: no call starts before it
// has passed, however much room the limit has. The pause is capped.
func TestAdaptiveRetryAfterPausesTheTarget(t *testing.T) {
	clk := newFakeClock()
	a := newAdaptive(8, 8, clk.now, nil)
	c := take(t, a, 1)[0]
	c.done(throttled(3 * time.Second))
	if _, _, until := a.snapshot(); !until.Equal(clk.now().Add(3 * time.Second)) {
		t.Fatalf("paused until %v, want 3s after the answer (%v)", until, clk.now())
	}
	clk.add(2999 * time.Millisecond)
	if !blocked(a) {
		t.Fatal("a call started before the Retry-After had passed")
	}
	clk.add(time.Millisecond)
	take(t, a, 4) // the limit halved: 4 places

	b := newAdaptive(8, 8, clk.now, nil)
	take(t, b, 1)[0].done(throttled(100 * 365 * 24 * time.Hour))
	if _, _, until := b.snapshot(); !until.Equal(clk.now().Add(maxThrottlePause)) {
		t.Errorf("paused until %v after a century's Retry-After, want %v", until, clk.now().Add(maxThrottlePause))
	}
}

// A caller waiting out a pause goes on by itself once it has passed.
func TestAdaptivePauseEnds(t *testing.T) {
	a := newAdaptive(2, 2, time.Now, nil)
	take(t, a, 1)[0].done(throttled(time.Second))
	_, _, until := a.snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, ok := a.acquire(ctx)
	if !ok {
		t.Fatal("the pause did not end")
	}
	if c.start.Before(until) {
		t.Errorf("a call started at %v, before the pause's end %v", c.start, until)
	}
}

// Overload answers (a 5xx, a timeout) take a tenth off, once a round trip;
// answers that are the request's fault (a 400) change nothing.
func TestAdaptiveBacksOffOnOverload(t *testing.T) {
	clk := newFakeClock()
	a := newAdaptive(10, 10, clk.now, nil)
	out := take(t, a, 3)
	clk.add(time.Millisecond)
	out[0].done(&downstream.Error{Class: downstream.Transient, StatusCode: 503, MayHaveActed: true, Err: errors.New("unavailable")})
	out[1].done(context.DeadlineExceeded) // unclassified: transient
	if got := limitOf(a); got != 9 {
		t.Fatalf("limit %d after overload answers of one round trip, want 9", got)
	}
	out[2].done(&downstream.Error{Class: downstream.Permanent, StatusCode: 400, Err: errors.New("bad title")})
	if got := limitOf(a); got != 9 {
		t.Fatalf("limit %d after a 400, want 9", got)
	}
}

// A latency rise well above the usual takes the limit down; a latency
// that stays where it rose to becomes the usual, and the limit climbs back.
func TestAdaptiveFollowsLatency(t *testing.T) {
	clk := newFakeClock()
	a := newAdaptive(16, 16, clk.now, nil)
	answer := func(took time.Duration) {
		c := take(t, a, 1)[0]
		clk.add(took)
		c.done(nil)
	}
	for range 100 {
		answer(10 * time.Millisecond)
	}
	if got := limitOf(a); got != 16 {
		t.Fatalf("limit %d at a steady latency, want 16", got)
	}
	low := 16
	for range 40 {
		answer(80 * time.Millisecond)
		low = min(low, limitOf(a))
	}
	if low > 12 {
		t.Fatalf("limit no lower than %d while the latency rose eightfold, want it taken down", low)
	}
	for range 1000 {
		answer(80 * time.Millisecond)
	}
	if got := limitOf(a); got != 16 {
		t.Errorf("limit %d after the latency settled, want back at 16", got)
	}
}

// A limit that starts below the workers doubles every round trip while the
// latency stays flat; the first signal ends that, and it climbs by one a
// round trip from there.
func TestAdaptiveProbesUpToTheWorkers(t *testing.T) {
	clk := newFakeClock()
	var gauge int
	a := newAdaptive(4, 64, clk.now, func(n int) { gauge = n })
	if got := limitOf(a); got != 4 || gauge != 4 {
		t.Fatalf("limit %d (gauge %d) at the start, want 4", got, gauge)
	}
	first := take(t, a, 4)
	if !blocked(a) {
		t.Fatal("a fifth call started under a limit of 4")
	}
	clk.add(50 * time.Millisecond)
	for _, c := range first {
		c.done(nil)
	}
	if got := limitOf(a); got != 8 {
		t.Fatalf("limit %d after the first round trip, want 8", got)
	}
	roundTrip := func() {
		out := take(t, a, limitOf(a))
		clk.add(50 * time.Millisecond)
		for _, c := range out {
			c.done(nil)
		}
	}
	for _, want := range []int{16, 32, 64, 64} {
		roundTrip()
		if got := limitOf(a); got != want || gauge != want {
			t.Fatalf("limit %d (gauge %d) after a round trip at a flat latency, want %d", got, gauge, want)
		}
	}

	b := newAdaptive(4, 64, clk.now, nil)
	c := take(t, b, 1)[0]
	clk.add(time.Millisecond)
	c.done(throttled(0))
	if got := limitOf(b); got != 2 {
		t.Fatalf("limit %d after a 429 while probing, want 2", got)
	}
	out := take(t, b, 2)
	clk.add(time.Millisecond)
	for _, c := range out {
		c.done(nil)
	}
	if got := limitOf(b); got != 2 {
		t.Errorf("limit %d after a round trip once a 429 ended the probing, want 2 (2.9: under one more a round trip; probing would double it)", got)
	}
}

// queuedOf is how many callers wait for a place.
func queuedOf(a *adaptive) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.waiting)
}

// waitFor starts a caller that waits for a place and sends i once it has
// one; it returns once the caller is queued.
func waitFor(t *testing.T, ctx context.Context, a *adaptive, i int, got chan<- int) {
	t.Helper()
	before := queuedOf(a)
	go func() {
		if _, ok := a.acquire(ctx); ok {
			got <- i
		}
	}()
	testwait.For(t, 5*time.Second, "the caller to queue", func() bool { return queuedOf(a) == before+1 })
}

// gotPlace checks that caller want, started by waitFor, is the one that
// gets the place freed.
func gotPlace(t *testing.T, got <-chan int, want int) {
	t.Helper()
	select {
	case i := <-got:
		if i != want {
			t.Errorf("caller %d got the freed place; want %d, the first in line", i, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no waiting caller got the freed place")
	}
}

// A call that ends wakes one waiting caller, the first to have come, and
// leaves the others queued.
func TestAdaptiveWakesOneWaiterPerFreePlace(t *testing.T) {
	a := newAdaptive(2, 2, time.Now, nil)
	calls := take(t, a, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int, 5)
	for i := range 5 {
		waitFor(t, ctx, a, i, got)
	}
	calls[0].done(nil)
	if n := queuedOf(a); n != 4 {
		t.Fatalf("%d callers still queued after one call ended; want 4: one place freed, one caller woken", n)
	}
	gotPlace(t, got, 0)
	testwait.Holds(t, 50*time.Millisecond, "the other four callers to stay queued", func() bool { return queuedOf(a) == 4 && len(got) == 0 })
}

// A caller that gives up just as it is woken hands the place to the next
// in line: no place stays free while a caller waits.
func TestAdaptiveWakeUpOfACallerThatGaveUpIsPassedOn(t *testing.T) {
	a := newAdaptive(1, 1, time.Now, nil)
	take(t, a, 1)
	first, stop := context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int, 2)
	waitFor(t, first, a, 0, got)
	waitFor(t, ctx, a, 1, got)
	// The place frees and the first caller is taken off the queue to be
	// woken, as a call's end does, but it gives up before it takes it.
	a.mu.Lock()
	a.inflight--
	a.waiting = a.waiting[1:]
	a.mu.Unlock()
	stop()
	gotPlace(t, got, 1)
}

// A caller that was waiting for a place when a 429 paused the target goes
// on once the pause has passed, though no call ends meanwhile.
func TestAdaptiveWaiterOutlivesAPause(t *testing.T) {
	a := newAdaptive(1, 1, time.Now, nil)
	c := take(t, a, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan int, 1)
	waitFor(t, ctx, a, 0, got)
	c.done(throttled(200 * time.Millisecond))
	select {
	case <-got:
		if _, _, until := a.snapshot(); time.Now().Before(until) {
			t.Errorf("the waiting caller went on at %v, before the pause's end %v", time.Now(), until)
		}
	case <-ctx.Done():
		t.Fatal("the waiting caller never went on after the pause")
	}
}
