package forwarder_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/downstream"
	"ticketrelay/ledger"
	"ticketrelay/targets"
)

// openHook opens a webhook target on rcv as the dispatcher opens targets.
func openHook(t *testing.T, e *env, rcv *hookReceiver, workers int) downstream.Target {
	t.Helper()
	tgs, closeTargets, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: rcv.srv.URL}}, t.TempDir(), time.Now,
		targets.WithWorkers(workers), targets.WithMetrics(e.m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTargets() })
	return tgs[0]
}

// A backlog for a target with a rate limit reaches the receiver no faster
// than the limit allows, however many workers are free: in any stretch of
// the receiver's arrivals, at most burst + rate × its length calls (with a
// tolerance for the network's jitter).
func TestRateLimitPacesABacklog(t *testing.T) {
	t.Parallel()
	const n, workers = 30, 8
	limit := downstream.RateLimit{PerSecond: 20, Burst: 3}
	const tolerance = 100 * time.Millisecond
	e := newEnv(t)
	rcv := newHookReceiver(t)
	hook := openHook(t, e, rcv, workers)
	e.createMany(t, "hook", n)
	cfg := testConfig()
	cfg.Workers = workers
	cfg.RateLimits = map[string]downstream.RateLimit{"hook": limit}
	e.startForwarder(t, cfg, hook)
	waitFor(t, 30*time.Second, "every ticket at the receiver", func() bool { return rcv.distinctKeys() == n })

	rcv.mu.Lock()
	at := slices.Clone(rcv.arrivals)
	rcv.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for i := range at {
		for j := i + limit.Burst; j < len(at); j++ {
			calls := j - i + 1
			least := time.Duration(float64(calls-limit.Burst) / limit.PerSecond * float64(time.Second))
			if got := at[j].Sub(at[i]); got < least-tolerance {
				t.Fatalf("%d calls arrived within %v (calls %d to %d); a limit of %v/s with bursts of %d needs %v",
					calls, got, i+1, j+1, limit.PerSecond, limit.Burst, least)
			}
		}
	}
	span := at[len(at)-1].Sub(at[0])
	t.Logf("%d calls in %v (the limit allows them in %v at the earliest)", n, span,
		time.Duration(float64(n-limit.Burst)/limit.PerSecond*float64(time.Second)))
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
		case ledger.StatusDelivered:
			delivered++
		case ledger.StatusRetrying, ledger.StatusFailed, ledger.StatusUncertain:
			t.Errorf("request %s is %s after waiting for the rate limit: nothing should be recorded", id, st.Status)
		}
	}
	if delivered != 1 {
		t.Errorf("%d requests delivered, want 1", delivered)
	}
}
