package forwarder_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/downstream"
	"ticketrelay/forwarder"
	"ticketrelay/targets"
)

// A 429 with Retry-After holds back the whole target, not only the refused
// request: once the forwarder has heard it, no call reaches the API before
// the time it named, though other requests wait and workers are free. The
// API here refuses every call for a second from its first refusal on, as a
// per-account limit does. Calls already on their way when the 429 was
// answered may still arrive (at most workers−1 of them, within slack); a
// call started after it must not.
func TestRetryAfterHoldsTheTarget(t *testing.T) {
	t.Parallel()
	const (
		n, workers = 24, 8
		retryAfter = time.Second
		slack      = 150 * time.Millisecond // a call already sent, arriving late
	)
	var (
		mu       sync.Mutex
		refused  time.Time // the first 429's answer
		arrivals []time.Time
		keys     = map[string]int{}
		posts    int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		posts++
		arrivals = append(arrivals, now)
		// The first call after a few answered ones starts the window.
		if refused.IsZero() && posts > 4 {
			refused = now
		}
		if !refused.IsZero() && now.Before(refused.Add(retryAfter)) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		keys[r.Header.Get("Idempotency-Key")]++
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t)
	tgs, closeTargets, err := targets.Open([]targets.Def{{Name: "hook", Kind: "webhook", Endpoint: srv.URL}}, t.TempDir(), time.Now,
		targets.WithWorkers(workers), targets.WithMetrics(e.m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTargets() })
	e.createMany(t, "hook", n)
	cfg := testConfig()
	cfg.Workers = workers
	f := forwarder.New(cfg, e.js, e.l, []downstream.Target{tgs[0]}, e.log, e.m, time.Now)
	runInBackground(t, "forwarder", f.Run)
	waitFor(t, 30*time.Second, "every ticket accepted by the API", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(keys) == n
	})

	mu.Lock()
	defer mu.Unlock()
	early, late := 0, 0
	for _, at := range arrivals {
		switch {
		case !at.After(refused):
		case at.Before(refused.Add(slack)):
			early++ // on its way when the 429 was answered
		case at.Before(refused.Add(retryAfter)):
			late++
		}
	}
	if late > 0 || early > workers-1 {
		t.Errorf("%d calls arrived within %v of the 429 and %d more before its Retry-After (%v) had passed; want at most %d, then none",
			early, slack, late, retryAfter, workers-1)
	}
	for k, c := range keys {
		if c != 1 {
			t.Errorf("key %s accepted %d times", k, c)
		}
	}
	if got := testutil.ToFloat64(e.m.ConcurrencyLimit.WithLabelValues("hook")); got < 1 || got > workers {
		t.Errorf("concurrency limit gauge %v, want within 1…%d", got, workers)
	}
	if got := testutil.ToFloat64(e.m.ConcurrencyWaited.WithLabelValues("hook")); got <= 0 {
		t.Errorf("concurrency wait seconds %v, want > 0 (calls waited out the pause)", got)
	}
	t.Logf("%d POSTs for %d tickets; %d arrived within %v of the 429", posts, n, early, slack)
}
