package forwarder_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/targets"
	"ticketrelay/internal/archetype"
	"ticketrelay/request"
)

// openHook opens a webhook target on rcv as the dispatcher opens targets.
func openHook(t *testing.T, e *env, rcv *hookReceiver, workers int) downstream.Target {
	t.Helper()
	return openWebhook(t, e, rcv.srv.URL, workers)
}

// openWebhook opens a webhook target named hook on url.
func openWebhook(t *testing.T, e *env, url string, workers int) downstream.Target {
	t.Helper()
	tgs, closeTargets, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: url}}, t.TempDir(), time.Now,
		targets.WithWorkers(workers), targets.WithMetrics(e.m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTargets() })
	return tgs[0]
}

// checkPace fails if some stretch of the sorted times holds more calls than
// burst + rate × its length allows, with a tolerance.
func checkPace(t *testing.T, what string, at []time.Time, limit downstream.RateLimit, tolerance time.Duration) {
	t.Helper()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for i := range at {
		for j := i + limit.Burst; j < len(at); j++ {
			calls := j - i + 1
			least := time.Duration(float64(calls-limit.Burst) / limit.PerSecond * float64(time.Second))
			if got := at[j].Sub(at[i]); got < least-tolerance {
				t.Fatalf("%s: %d calls within %v (calls %d to %d); a limit of %v/s with bursts of %d needs %v (tolerance %v)",
					what, calls, got, i+1, j+1, limit.PerSecond, limit.Burst, least, tolerance)
			}
		}
	}
}

// A backlog for a target with a rate limit reaches the receiver no faster
// than the limit allows, however many workers are free: in any stretch of
// calls, at most burst + rate × its length. The turns the limiter gives
// must keep it exactly (1 ms tolerance); the receiver's arrival times must
// keep it within the longest a call took from its turn to its arrival in
// this run, since a loaded machine (a late timer, the scheduler, the
// network) can bunch calls whose turns were spaced.
func TestRateLimitPacesABacklog(t *testing.T) {
	t.Parallel()
	const n, workers = 30, 8
	limit := downstream.RateLimit{PerSecond: 20, Burst: 3}
	e := newEnv(t)
	rcv := newHookReceiver(t)
	hook := openHook(t, e, rcv, workers)
	e.createMany(t, "hook", n)
	cfg := testConfig()
	cfg.Workers = workers
	cfg.RateLimits = map[string]downstream.RateLimit{"hook": limit}
	var (
		mu    sync.Mutex
		turns = map[string]time.Time{}
	)
	f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, cfg, e.js, e.l, []downstream.Target{hook})
	f.PacedForTest(func(id string, turn time.Time) {
		mu.Lock()
		turns[id] = turn
		mu.Unlock()
	})
	runInBackground(t, "forwarder", f.Run)
	waitFor(t, 30*time.Second, "every ticket at the receiver", func() bool { return rcv.distinctKeys() == n })

	mu.Lock()
	rcv.mu.Lock()
	var given, arrivals []time.Time
	var latest time.Duration
	for id, turn := range turns {
		arrived, ok := rcv.firstAt[id] // the key is the request id (no namespace)
		if !ok {
			t.Fatalf("request %s had its turn but never arrived", id)
		}
		given, arrivals = append(given, turn), append(arrivals, arrived)
		latest = max(latest, arrived.Sub(turn))
	}
	rcv.mu.Unlock()
	mu.Unlock()
	if len(given) != n {
		t.Fatalf("%d calls had a turn under the limit, want %d", len(given), n)
	}
	checkPace(t, "the limiter's turns", given, limit, time.Millisecond)
	checkPace(t, "calls at the receiver", arrivals, limit, latest+time.Millisecond)
	span := arrivals[len(arrivals)-1].Sub(arrivals[0]) // sorted by checkPace
	t.Logf("%d calls in %v at the receiver (the limit allows them in %v at the earliest; slowest from turn to arrival %v)", n, span,
		time.Duration(float64(n-limit.Burst)/limit.PerSecond*float64(time.Second)), latest)
	if waits := testutil.ToFloat64(e.m.RateLimitWaits.WithLabelValues("hook")); waits < float64(n-limit.Burst-workers) {
		t.Errorf("%v calls counted as waiting for the rate limit, want at least %d", waits, n-limit.Burst-workers)
	}
	if waited := testutil.ToFloat64(e.m.RateLimitWaited.WithLabelValues("hook")); waited <= 0 {
		t.Errorf("rate-limit wait seconds %v, want > 0", waited)
	}
}

// A call waiting for its turn under the rate limit is not a call: a
// forwarder stopped meanwhile returns at once, hands the message back and
// records nothing, and the limit is still kept by the next run.
func TestRateLimitWaitEndsAtShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rcv := newHookReceiver(t)
	hook := openHook(t, e, rcv, 2)
	ids := e.createMany(t, "hook", 3)
	cfg := testConfig()
	cfg.Workers = 2
	cfg.RateLimits = map[string]downstream.RateLimit{"hook": {PerSecond: 1.0 / 600, Burst: 1}} // one call, then one every 10 minutes
	stop := e.startForwarder(t, cfg, hook)
	waitFor(t, 15*time.Second, "the first call", func() bool { return rcv.distinctKeys() >= 1 })
	waitFor(t, 15*time.Second, "a second call to wait for the limit", func() bool {
		return testutil.ToFloat64(e.m.RateLimitWaits.WithLabelValues("hook")) >= 1
	})
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the forwarder took %v to stop while a call waited for the rate limit", took)
	}
	if got := rcv.distinctKeys(); got != 1 {
		t.Fatalf("%d calls reached the receiver, want 1", got)
	}
	delivered := 0
	for _, id := range ids {
		st := e.find(t, id)
		switch st.Status {
		case request.StatusDelivered:
			delivered++
		case request.StatusRetrying, request.StatusFailed, request.StatusUncertain:
			t.Errorf("request %s is %s after waiting for the rate limit: nothing should be recorded", id, st.Status)
		}
	}
	if delivered != 1 {
		t.Errorf("%d requests delivered, want 1", delivered)
	}
}
