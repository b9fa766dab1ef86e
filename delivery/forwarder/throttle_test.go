package forwarder_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/internal/archetype"
)

// timedTarget notes when each call starts and when the first 429 came
// back, as the forwarder sees them.
type timedTarget struct {
	downstream.Target
	mu       sync.Mutex
	starts   []time.Time
	refusal  time.Time // the first 429's return
	throttle int
}

func (tt *timedTarget) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	tt.mu.Lock()
	tt.starts = append(tt.starts, time.Now())
	tt.mu.Unlock()
	r, err := tt.Target.Deliver(ctx, d)
	if e := downstream.Classify(err); err != nil && e.Throttled {
		tt.mu.Lock()
		if tt.refusal.IsZero() {
			tt.refusal = time.Now()
		}
		tt.throttle++
		tt.mu.Unlock()
	}
	return r, err
}

// A 429 with Retry-After holds back the whole target, not only the refused
// request: once the forwarder has heard it, no call starts before the time
// it named, though other requests wait and workers are free. The API here
// refuses every call for two seconds from its first refusal on, as a
// per-account limit does. Calls that had their place before the 429 came
// back may still start just after it (at most workers−1, within slack);
// without the pause, every waiting request is called at once.
func TestRetryAfterHoldsTheTarget(t *testing.T) {
	t.Parallel()
	const (
		n, workers = 40, 8
		retryAfter = 2 * time.Second
		slack      = 500 * time.Millisecond
	)
	var (
		mu      sync.Mutex
		refused time.Time // the first 429's arrival
		keys    = map[string]int{}
		posts   int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		posts++
		// The first call after a few answered ones starts the window.
		if refused.IsZero() && posts > 4 {
			refused = now
		}
		if !refused.IsZero() && now.Before(refused.Add(retryAfter)) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		keys[r.Header.Get("Idempotency-Key")]++
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t)
	hook := &timedTarget{Target: openWebhook(t, e, srv.URL, workers)}
	e.createMany(t, "hook", n)
	cfg := testConfig()
	cfg.Workers = workers
	f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, cfg, e.js, e.l, []downstream.Target{hook})
	runInBackground(t, "forwarder", f.Run)
	waitFor(t, 60*time.Second, "every ticket accepted by the API", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(keys) == n
	})

	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.refusal.IsZero() {
		t.Fatal("no call was refused")
	}
	soon, later := 0, 0
	for _, at := range hook.starts {
		switch {
		case !at.After(hook.refusal):
		case at.Before(hook.refusal.Add(slack)):
			soon++ // had its place before the 429 came back
		case at.Before(hook.refusal.Add(retryAfter)):
			later++
		}
	}
	if later > 0 || soon > workers-1 {
		t.Errorf("%d calls started within %v of the 429's return and %d more before its Retry-After (%v) had passed; want at most %d, then none",
			soon, slack, later, retryAfter, workers-1)
	}
	mu.Lock()
	for k, c := range keys {
		if c != 1 {
			t.Errorf("key %s accepted %d times", k, c)
		}
	}
	mu.Unlock()
	if got := testutil.ToFloat64(e.m.ConcurrencyLimit.WithLabelValues("hook")); got < 1 || got > workers {
		t.Errorf("concurrency limit gauge %v, want within 1…%d", got, workers)
	}
	if got := testutil.ToFloat64(e.m.ConcurrencyWaited.WithLabelValues("hook")); got <= 0 {
		t.Errorf("concurrency wait seconds %v, want > 0 (calls waited out the pause)", got)
	}
	t.Logf("%d calls for %d tickets, %d refused; %d started within %v of the first 429's return", len(hook.starts), n, hook.throttle, soon, slack)
}
