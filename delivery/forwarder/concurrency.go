package forwarder

import (
	"context"
	"slices"
	"sync"
	"time"

	"ticketrelay/delivery/downstream"
)

// Adaptive concurrency (decisions 0061, 0063). Each target's calls in
// flight are held under a limit that follows the downstream's answers,
// between 1 and the target's workers. It starts at StartConcurrency, or at
// the target's own count (downstream.Parallel), never above the workers:
//
//   - until the first signal below, each answered call adds one: the limit
//     doubles every round trip while the latency stays flat, so a slow but
//     unloaded API (where more calls at once are more calls a second) gets
//     its calls in flight within a few round trips;
//   - a call the API refused for its rate limit (a 429) halves the limit,
//     once for the calls that were out together, and, when the answer
//     carried a Retry-After, no call to the target starts before that time
//     has passed (capped at maxThrottlePause): the API said when it takes
//     calls again, for every request, not only the refused one;
//   - a call that failed as an overloaded API fails (a 5xx, a timeout, a
//     refused connection) takes a tenth off, at most once a round trip;
//   - a call whose latency rose well above the target's usual one (its
//     recent mean more than latencyRise times the long-run mean) takes a
//     tenth off, at most once a round trip: calls queue somewhere
//     downstream, and more of them at once only lengthen the queue;
//   - after the first such signal, every other answered call adds 1/limit:
//     one more call in flight per round trip of the whole limit, until the
//     workers' count.
//
// The configured rate_limit and each request's Retry-After stay hard caps
// on top of it; the limit only ever holds calls back.

const (
	// maxThrottlePause caps the pause of a whole target after a 429: an
	// API's Retry-After of an hour (or a century) parks the refused
	// request (maxRetryDelay), not every other one for as long.
	maxThrottlePause = time.Minute
	// latencyRise is how far the recent latency may climb above the
	// long-run one before the limit is taken down.
	latencyRise = 2.0
	// shortWeight and longWeight are the weights of a new latency sample
	// in the recent and the long-run means.
	shortWeight = 0.1
	longWeight  = 0.01
	// latencyWarmup is how many answered calls the long-run mean needs
	// before it is trusted.
	latencyWarmup = 20
	// backOff is what an overload signal (not a 429) leaves of the limit.
	backOff = 0.9
)

// adaptive is one target's limit on calls in flight. Its zero value is not
// ready; see newAdaptive.
type adaptive struct {
	now func() time.Time
	max int

	mu    sync.Mutex
	limit float64
	// probing: no signal has taken the limit down yet, and it grows by a
	// call per answer rather than per round trip.
	probing  bool
	inflight int
	// pauseUntil: no call starts before it (a 429's Retry-After).
	pauseUntil time.Time
	// decreased is when the limit was last taken down: answers to calls
	// that started before it were already accounted for.
	decreased time.Time
	// short and long are the recent and long-run mean latency (seconds)
	// of answered calls; samples counts them.
	short, long float64
	samples     int
	// waiting holds the callers waiting for a place, first come first. A
	// call that ends wakes as many of them as there are places free, not
	// all: below the workers' count every worker but the limit's waits,
	// and waking them all at each answer is work for none of them.
	waiting []chan struct{}
	// observe, if set, hears the limit after each change (the gauge).
	observe func(limit int)
}

// newAdaptive starts a limit at start calls in flight (at most max) that
// may climb to max.
func newAdaptive(start, max int, now func() time.Time, observe func(int)) *adaptive {
	start = min(start, max)
	a := &adaptive{now: now, max: max, limit: float64(start), probing: start < max, observe: observe}
	if observe != nil {
		observe(start)
	}
	return a
}

// call is one call's place under the limit.
type call struct {
	lim   *adaptive
	start time.Time
}

// acquire waits until the target is not paused and a call fits under the
// limit, and takes its place. It reports false if ctx ends first.
func (a *adaptive) acquire(ctx context.Context) (*call, bool) {
	var turn chan struct{} // made at the first wait
	for first := true; ; first = false {
		a.mu.Lock()
		now := a.now()
		pause := a.pauseUntil.Sub(now)
		if pause <= 0 && a.inflight < a.current() {
			a.inflight++
			a.leave(turn)
			a.mu.Unlock()
			return &call{lim: a, start: now}, true
		}
		if turn == nil {
			turn = make(chan struct{}, 1)
		}
		a.join(turn, first)
		a.mu.Unlock()
		var timeout <-chan time.Time
		var t *time.Timer
		if pause > 0 {
			// Callers waiting out a pause wake by themselves when it ends.
			t = time.NewTimer(pause)
			timeout = t.C
		}
		gaveUp := false
		select {
		case <-ctx.Done():
			gaveUp = true
		case <-turn:
		case <-timeout:
		}
		if t != nil {
			t.Stop()
		}
		if gaveUp {
			a.mu.Lock()
			if !a.leave(turn) {
				// Woken for a place as it gave up: the place goes to the
				// next in line.
				a.wakeFree()
			}
			a.mu.Unlock()
			return nil, false
		}
	}
}

// join queues turn unless it is queued already: at the back on a caller's
// first wait, at the front after a wake-up whose place another caller took
// first. a.mu must be held.
func (a *adaptive) join(turn chan struct{}, first bool) {
	if slices.Contains(a.waiting, turn) {
		return
	}
	if first {
		a.waiting = append(a.waiting, turn)
	} else {
		a.waiting = slices.Insert(a.waiting, 0, turn)
	}
}

// leave takes turn out of the queue and reports whether it was still
// there (false: a call's end woke it). a.mu must be held.
func (a *adaptive) leave(turn chan struct{}) bool {
	i := slices.Index(a.waiting, turn)
	if i < 0 {
		return false
	}
	a.waiting = slices.Delete(a.waiting, i, i+1)
	return true
}

// current is the limit as a number of calls. a.mu must be held.
func (a *adaptive) current() int { return max(1, int(a.limit)) }

// wakeFree wakes the first waiting callers, one for each place free now.
// While the target is paused, those woken wait for the pause's end on a
// timer of their own, first in line. a.mu must be held.
func (a *adaptive) wakeFree() {
	for n := a.current() - a.inflight; n > 0 && len(a.waiting) > 0; n-- {
		turn := a.waiting[0]
		a.waiting = a.waiting[1:]
		select {
		case turn <- struct{}{}:
		default: // woken already
		}
	}
}

// release frees c's place without a verdict on the downstream: the call
// was not made, or its answer says nothing of the API's load.
func (c *call) release() { c.end(nil, false) }

// done frees c's place and adjusts the limit to the call's outcome: err
// is what the call returned (nil: answered).
func (c *call) done(err error) { c.end(err, true) }

func (c *call) end(err error, made bool) {
	a := c.lim
	if a == nil {
		return
	}
	c.lim = nil
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	before := a.current()
	if made {
		a.adjust(c.start, a.now(), err)
	}
	if a.observe != nil && a.current() != before {
		a.observe(a.current())
	}
	a.wakeFree()
}

// adjust applies one call's outcome. a.mu must be held.
func (a *adaptive) adjust(start, now time.Time, err error) {
	took := now.Sub(start)
	if err != nil {
		e := downstream.Classify(err)
		switch {
		case e.Throttled:
			if e.RetryAfter > 0 {
				if until := now.Add(min(e.RetryAfter, maxThrottlePause)); until.After(a.pauseUntil) {
					a.pauseUntil = until
				}
			}
			a.decrease(start, now, 0.5)
		case e.Class == downstream.Transient:
			// A 5xx, a timeout, a refused or reset connection: the API is
			// struggling or gone.
			a.decrease(start, now, backOff)
		}
		return
	}
	s := took.Seconds()
	if a.samples == 0 {
		a.short, a.long = s, s
	} else {
		a.short += shortWeight * (s - a.short)
		a.long += longWeight * (s - a.long)
	}
	a.samples++
	if a.samples > latencyWarmup && a.short > latencyRise*a.long {
		a.decrease(start, now, backOff)
		return
	}
	step := 1 / a.limit
	if a.probing {
		step = 1
	}
	a.limit = min(float64(a.max), a.limit+step)
}

// decrease multiplies the limit by factor, unless the call started before
// the last decrease: the calls that were out together are one signal.
func (a *adaptive) decrease(start, now time.Time, factor float64) {
	if start.Before(a.decreased) {
		return
	}
	a.limit = max(1, a.limit*factor)
	a.decreased = now
	a.probing = false
}

// snapshot is the limit's state, for tests and logs.
func (a *adaptive) snapshot() (limit int, inflight int, pauseUntil time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.current(), a.inflight, a.pauseUntil
}
