package forwarder_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream"
	"ticketrelay/metrics"
	"ticketrelay/request"
)

// Targets that take a dedupe key: every resend carries the same key.

func TestKeyedDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)

	st := e.waitStatus(t, id, request.StatusDelivered)
	// The relay's mark and the delivery record are separate commits: a
	// delivery this fast can be recorded before the mark lands.
	waitFor(t, 15*time.Second, "the outbox row to be marked published", func() bool {
		st = e.find(t, id)
		return st.PublishedAt != nil
	})
	items := api.Items()
	if len(items) != 1 {
		t.Fatalf("API holds %d items, want 1", len(items))
	}
	if st.ExternalID != items[0].Receipt.ExternalID || st.ExternalURL != items[0].Receipt.URL {
		t.Errorf("find_request says %s %s, API created %+v", st.ExternalID, st.ExternalURL, items[0].Receipt)
	}
	if st.Attempts != 1 || st.LastError != "" || st.NextAttemptAt != nil || st.PublishedAt == nil {
		t.Errorf("delivered status %+v: want attempts 1, no error, no next attempt, a publish time", st)
	}
	if !strings.Contains(st.Detail, st.ExternalID) {
		t.Errorf("detail %q does not name the external id", st.Detail)
	}
	calls := api.Calls()
	if len(calls) != 1 || calls[0].D.Key != id || calls[0].D.Attempt != 1 || calls[0].D.Ticket.RequestID != id || items[0].Title != calls[0].D.Ticket.Title {
		t.Errorf("calls %+v: want one call keyed by the request id", calls)
	}
	e.waitConsumerIdle(t, api.name)
	if got := testutil.ToFloat64(e.m.Deliveries.WithLabelValues(api.name, metrics.OutcomeDelivered)); got != 1 {
		t.Errorf("deliveries_total{outcome=delivered} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.m.DeliveryAttempts.WithLabelValues(api.name)); got != 1 {
		t.Errorf("delivery_attempts_total = %v, want 1", got)
	}
}

func TestKeyedTransientThenDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	second := newGate(t)
	api.hook = func(ctx context.Context, n int, d downstream.Delivery) (behaviour, error) {
		switch n {
		case 1:
			return failBefore, transient(503, "service unavailable")
		case 2:
			second.Wait(ctx)
			return failBefore, transient(502, "bad gateway")
		}
		return act, nil
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)

	// While the second call is held, find_request shows the first failure.
	second.WaitArrived(t)
	st := e.find(t, id)
	first := api.Calls()[0]
	if st.Status != request.StatusRetrying || st.Attempts != 1 || !strings.Contains(st.LastError, "503") {
		t.Errorf("during retry: %+v, want retrying after attempt 1 with the 503", st)
	}
	if st.NextAttemptAt == nil || st.NextAttemptAt.Before(first.End.Add(10*time.Millisecond)) || st.NextAttemptAt.After(first.End.Add(10*time.Second)) {
		t.Errorf("next_attempt_at %v: want within the retry policy after the first call ended at %v", st.NextAttemptAt, first.End)
	}
	if !strings.Contains(st.Detail, "retried automatically") {
		t.Errorf("retrying detail %q", st.Detail)
	}
	second.Open()

	st = e.waitStatus(t, id, request.StatusDelivered)
	if st.Attempts != 3 || st.LastError != "" || st.NextAttemptAt != nil {
		t.Errorf("delivered: %+v, want attempts 3 and no leftover error", st)
	}
	calls := api.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	for i, c := range calls {
		if c.D.Key != id || c.D.Attempt != i+1 {
			t.Errorf("call %d: key %q attempt %d, want key %q attempt %d", i+1, c.D.Key, c.D.Attempt, id, i+1)
		}
	}
	e.waitConsumerIdle(t, api.name)
	for outcome, want := range map[string]float64{metrics.OutcomeRetrying: 2, metrics.OutcomeDelivered: 1, metrics.OutcomeFailed: 0} {
		if got := testutil.ToFloat64(e.m.Deliveries.WithLabelValues(api.name, outcome)); got != want {
			t.Errorf("deliveries_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(e.m.DeliveryAttempts.WithLabelValues(api.name)); got != 3 {
		t.Errorf("delivery_attempts_total = %v, want 3", got)
	}
}

func TestKeyedRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	const retryAfter = 400 * time.Millisecond // far above the 20ms policy
	second := newGate(t)
	api.hook = func(ctx context.Context, n int, d downstream.Delivery) (behaviour, error) {
		switch n {
		case 1:
			return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 429, RetryAfter: retryAfter, Err: errors.New("rate limited")}
		case 2:
			second.Wait(ctx)
		}
		return act, nil
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)

	second.WaitArrived(t)
	st := e.find(t, id)
	calls := api.Calls()
	if st.Status != request.StatusRetrying || st.NextAttemptAt == nil {
		t.Fatalf("during retry: %+v", st)
	}
	if earliest := calls[0].End.Add(retryAfter); st.NextAttemptAt.Before(earliest) {
		t.Errorf("next_attempt_at %v is before the first answer + Retry-After (%v)", st.NextAttemptAt, earliest)
	}
	if wait := calls[1].Start.Sub(calls[0].End); wait < retryAfter {
		t.Errorf("second call came %v after the 429, want at least the Retry-After %v", wait, retryAfter)
	}
	second.Open()
	e.waitStatus(t, id, request.StatusDelivered)
}

func TestKeyedPermanentAndAuthFail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		err    error
		reason string
		auth   float64 // auth_failures_total
	}{
		{"permanent", &downstream.Error{Class: downstream.Permanent, StatusCode: 422, Err: errors.New("priority field rejected")}, "priority field rejected", 0},
		{"auth", &downstream.Error{Class: downstream.Auth, StatusCode: 401, Err: errors.New("token expired")}, "auth error (HTTP 401): token expired", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			api := newKeyedAPI("tracker")
			api.hook = func(context.Context, int, downstream.Delivery) (behaviour, error) { return failBefore, c.err }
			e.startForwarder(t, testConfig(), api)
			id := e.create(t, api.name)

			st := e.waitStatus(t, id, request.StatusFailed)
			if !strings.Contains(st.LastError, c.reason) || !strings.Contains(st.Detail, c.reason) || st.Attempts != 1 || st.NextAttemptAt != nil {
				t.Errorf("failed status %+v: want the reason %q after one attempt", st, c.reason)
			}
			// Terminated: nothing left to deliver, so no further call can come.
			e.waitConsumerIdle(t, api.name)
			if n := len(api.Calls()); n != 1 {
				t.Errorf("%d calls, want exactly 1", n)
			}
			if got := testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)); got != 1 {
				t.Errorf("dead_letters_total = %v, want 1", got)
			}
			if got := testutil.ToFloat64(e.m.Deliveries.WithLabelValues(api.name, metrics.OutcomeFailed)); got != 1 {
				t.Errorf("deliveries_total{outcome=failed} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(e.m.AuthFailures.WithLabelValues(api.name)); got != c.auth {
				t.Errorf("auth_failures_total = %v, want %v", got, c.auth)
			}
		})
	}
}

func TestKeyedAttemptsExhausted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		return failBefore, transient(500, fmt.Sprintf("internal error %d", n))
	}
	cfg := testConfig()
	cfg.MaxAttempts = 3
	e.startForwarder(t, cfg, api)
	id := e.create(t, api.name)

	st := e.waitStatus(t, id, request.StatusFailed)
	if !strings.Contains(st.LastError, "attempts exhausted") || !strings.Contains(st.LastError, "internal error 3") || st.Attempts != 3 {
		t.Errorf("failed status %+v: want attempts exhausted after 3 with the last error", st)
	}
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
	if got := testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)); got != 1 {
		t.Errorf("dead_letters_total = %v, want 1", got)
	}
}

// A rate limit is the API asking to slow down, not a fault of the request:
// calls it refuses do not count toward MaxAttempts, however many there are,
// while failures that are the request's (or the API's) still do.
func TestThrottledCallsDoNotCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	const throttled = 5
	api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		switch {
		case n <= throttled:
			return failBefore, &downstream.Error{Class: downstream.Transient, Throttled: true, StatusCode: 429, Err: errors.New("rate limited")}
		case n == throttled+1:
			return failBefore, transient(503, "service unavailable")
		}
		return act, nil
	}
	cfg := testConfig()
	cfg.MaxAttempts = 2
	e.startForwarder(t, cfg, api)
	id := e.create(t, api.name)

	st := e.waitStatus(t, id, request.StatusDelivered)
	if st.Attempts != throttled+2 || st.Throttled != throttled {
		t.Errorf("delivered: %+v; want %d attempts, %d of them throttled", st, throttled+2, throttled)
	}

	// The same API failing for another reason exhausts the two attempts.
	api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		if n <= throttled+2+1 {
			return failBefore, &downstream.Error{Class: downstream.Transient, Throttled: true, StatusCode: 429, Err: errors.New("rate limited")}
		}
		return failBefore, transient(503, "service unavailable")
	}
	id = e.create(t, api.name)
	st = e.waitStatus(t, id, request.StatusFailed)
	if st.Attempts != 3 || st.Throttled != 1 || !strings.Contains(st.LastError, "2 attempts exhausted (and 1 more refused by a rate limit)") {
		t.Errorf("failed: %+v; want 2 counted attempts exhausted after 1 throttled", st)
	}
}

// A keyed API processed the call but its answer was lost: the forwarder
// sends again with the same key, and the API's dedupe gives back the item.
func TestKeyedLostResponseResendsSameKey(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"", "acme-prod"} {
		t.Run("namespace="+ns, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			api := newKeyedAPI("tracker")
			api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
				if n == 1 {
					return actAndLose, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, Err: errors.New("connection reset after the request was sent")}
				}
				return act, nil
			}
			cfg := testConfig()
			cfg.KeyNamespace = ns
			e.startForwarder(t, cfg, api)
			id := e.create(t, api.name)

			st := e.waitStatus(t, id, request.StatusDelivered)
			calls := api.Calls()
			if len(calls) != 2 {
				t.Fatalf("%d calls, want 2 (the lost one and the resend)", len(calls))
			}
			want := id
			if ns != "" {
				want = ns + ":" + id
			}
			if calls[0].D.Key != want || calls[1].D.Key != calls[0].D.Key {
				t.Errorf("keys %q then %q, want %q on both", calls[0].D.Key, calls[1].D.Key, want)
			}
			items := api.Items()
			if len(items) != 1 || st.ExternalID != items[0].Receipt.ExternalID || st.Attempts != 2 {
				t.Errorf("API items %+v, status %+v: want the one item created by the lost call", items, st)
			}
		})
	}
}
