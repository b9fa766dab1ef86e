package forwarder_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/downstream"
	"ticketrelay/downstream/local"
	"ticketrelay/forwarder"
	"ticketrelay/internal/testwait"
	"ticketrelay/ledger"
	"ticketrelay/metrics"
	"ticketrelay/outbox"
	"ticketrelay/ticket"
)

func TestKeyedDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)

	st := e.waitStatus(t, id, ledger.StatusDelivered)
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
	if st.Status != ledger.StatusRetrying || st.Attempts != 1 || !strings.Contains(st.LastError, "503") {
		t.Errorf("during retry: %+v, want retrying after attempt 1 with the 503", st)
	}
	if st.NextAttemptAt == nil || st.NextAttemptAt.Before(first.End.Add(10*time.Millisecond)) || st.NextAttemptAt.After(first.End.Add(10*time.Second)) {
		t.Errorf("next_attempt_at %v: want within the retry policy after the first call ended at %v", st.NextAttemptAt, first.End)
	}
	if !strings.Contains(st.Detail, "retried automatically") {
		t.Errorf("retrying detail %q", st.Detail)
	}
	second.Open()

	st = e.waitStatus(t, id, ledger.StatusDelivered)
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
	if st.Status != ledger.StatusRetrying || st.NextAttemptAt == nil {
		t.Fatalf("during retry: %+v", st)
	}
	if earliest := calls[0].End.Add(retryAfter); st.NextAttemptAt.Before(earliest) {
		t.Errorf("next_attempt_at %v is before the first answer + Retry-After (%v)", st.NextAttemptAt, earliest)
	}
	if wait := calls[1].Start.Sub(calls[0].End); wait < retryAfter {
		t.Errorf("second call came %v after the 429, want at least the Retry-After %v", wait, retryAfter)
	}
	second.Open()
	e.waitStatus(t, id, ledger.StatusDelivered)
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

			st := e.waitStatus(t, id, ledger.StatusFailed)
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

	st := e.waitStatus(t, id, ledger.StatusFailed)
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

			st := e.waitStatus(t, id, ledger.StatusDelivered)
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

// An API without key or lookup acted, but the answer was lost: never resend.
func TestUnkeyedNoLookupUncertain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newUnkeyedAPI("webhook")
	api.hook = func(context.Context, int, downstream.Delivery) (behaviour, error) {
		return actAndLose, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, StatusCode: 504, Err: errors.New("gateway timeout")}
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)

	st := e.waitStatus(t, id, ledger.StatusUncertain)
	if !strings.Contains(st.Detail, "Check "+api.name) || !strings.Contains(st.Detail, st.TicketID) {
		t.Errorf("uncertain detail %q: want it to tell to check %s for %s", st.Detail, api.name, st.TicketID)
	}
	if !strings.Contains(st.LastError, "gateway timeout") || st.Attempts != 1 || st.NextAttemptAt != nil {
		t.Errorf("uncertain status %+v", st)
	}
	e.waitConsumerIdle(t, api.name) // acked: no redelivery can come
	if n := len(api.Calls()); n != 1 {
		t.Errorf("%d calls, want exactly 1", n)
	}
	if got := testutil.ToFloat64(e.m.Uncertain.WithLabelValues(api.name)); got != 1 {
		t.Errorf("uncertain_requests_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)); got != 0 {
		t.Errorf("dead_letters_total = %v, want 0", got)
	}
}

// An API without key or lookup whose failure proves nothing was created
// (MayHaveActed false) is retried like any other.
func TestUnkeyedNoLookupRetriesWhenNothingActed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newUnkeyedAPI("webhook")
	api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		if n == 1 {
			return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 429, Err: errors.New("slow down")}
		}
		return act, nil
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	st := e.waitStatus(t, id, ledger.StatusDelivered)
	if n := len(api.Items()); n != 1 || st.Attempts != 2 || len(api.Calls()) != 2 {
		t.Errorf("items %d, calls %d, status %+v: want one item after two calls", n, len(api.Calls()), st)
	}
}

// A crash during a call leaves "attempting": the message that comes back
// must not be sent again to an API that cannot tell whether it was created.
func TestUnkeyedCrashDuringCallUncertain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newUnkeyedAPI("webhook")
	id := e.createAttempted(t, api.name)
	if st := e.find(t, id); st.Status != ledger.StatusPublished || !st.InProgress {
		t.Fatalf("before the forwarder: %+v, want an attempt in progress", st)
	}
	e.startForwarder(t, testConfig(), api)

	st := e.waitStatus(t, id, ledger.StatusUncertain)
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 0 {
		t.Errorf("%d calls after a crashed attempt, want 0", n)
	}
	if !strings.Contains(st.Detail, "Check "+api.name) || st.Attempts != 1 {
		t.Errorf("uncertain status %+v", st)
	}
	if got := testutil.ToFloat64(e.m.Uncertain.WithLabelValues(api.name)); got != 1 {
		t.Errorf("uncertain_requests_total = %v, want 1", got)
	}
}

func TestUnkeyedConsistentLookup(t *testing.T) {
	t.Parallel()
	t.Run("crashed attempt found", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		api := newLookupAPI("desk")
		id := e.createAttempted(t, api.name)
		// The crashed attempt did create the item.
		receipt := api.seed(id)
		e.startForwarder(t, testConfig(), api)

		st := e.waitStatus(t, id, ledger.StatusDelivered)
		if st.ExternalID != receipt.ExternalID || st.ExternalURL != receipt.URL {
			t.Errorf("delivered as %s %s, want the found item %+v", st.ExternalID, st.ExternalURL, receipt)
		}
		e.waitConsumerIdle(t, api.name)
		if n := len(api.Calls()); n != 0 {
			t.Errorf("%d create calls, want 0 (the lookup found the item)", n)
		}
		if finds := api.Finds(); len(finds) != 1 || finds[0].Key != id {
			t.Errorf("lookups %+v, want one by key %s", finds, id)
		}
		if n := len(api.Items()); n != 1 {
			t.Errorf("API holds %d items, want 1", n)
		}
	})
	t.Run("crashed attempt absent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		api := newLookupAPI("desk")
		id := e.createAttempted(t, api.name)
		e.startForwarder(t, testConfig(), api)

		st := e.waitStatus(t, id, ledger.StatusDelivered)
		e.waitConsumerIdle(t, api.name)
		calls := api.Calls()
		if len(calls) != 1 || calls[0].D.Attempt != 2 || calls[0].D.Key != id {
			t.Errorf("create calls %+v, want exactly one (attempt 2) after the lookup proved absence", calls)
		}
		if len(api.Finds()) != 1 {
			t.Errorf("%d lookups, want 1", len(api.Finds()))
		}
		if items := api.Items(); len(items) != 1 || st.ExternalID != items[0].Receipt.ExternalID {
			t.Errorf("items %+v, status %+v", items, st)
		}
	})
	t.Run("lost answer reconciled by lookup", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		api := newLookupAPI("desk")
		api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
			if n == 1 {
				return actAndLose, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, Err: errors.New("read timeout")}
			}
			return act, nil
		}
		e.startForwarder(t, testConfig(), api)
		id := e.create(t, api.name)

		st := e.waitStatus(t, id, ledger.StatusDelivered)
		e.waitConsumerIdle(t, api.name)
		if n := len(api.Calls()); n != 1 {
			t.Errorf("%d create calls, want 1 (the second delivery must look up, not resend)", n)
		}
		if items := api.Items(); len(items) != 1 || st.ExternalID != items[0].Receipt.ExternalID {
			t.Errorf("items %+v, status %+v", items, st)
		}
		if len(api.Finds()) != 1 {
			t.Errorf("%d lookups, want 1", len(api.Finds()))
		}
	})
	t.Run("attempts exhausted", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		api := newLookupAPI("desk")
		// Every call times out before reaching the API: nothing is created,
		// but the forwarder cannot know that without a lookup.
		api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
			return failBefore, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, Err: fmt.Errorf("timeout %d", n)}
		}
		cfg := testConfig()
		cfg.MaxAttempts = 3
		e.startForwarder(t, cfg, api)
		id := e.create(t, api.name)

		var st ledger.RequestStatus
		waitFor(t, 15*time.Second, "the request to fail or the API to get more than MaxAttempts calls", func() bool {
			st = e.find(t, id)
			return st.Status == ledger.StatusFailed || len(api.Calls()) > cfg.MaxAttempts
		})
		if st.Status != ledger.StatusFailed || !strings.Contains(st.LastError, "attempts exhausted") {
			t.Fatalf("status %+v after %d calls: want failed with attempts exhausted after %d calls",
				st, len(api.Calls()), cfg.MaxAttempts)
		}
		e.waitConsumerIdle(t, api.name)
		if n := len(api.Calls()); n != cfg.MaxAttempts {
			t.Errorf("%d create calls, want %d", n, cfg.MaxAttempts)
		}
		// Each redelivery looked up first, the last one before giving up.
		if n := len(api.Finds()); n != cfg.MaxAttempts {
			t.Errorf("%d lookups, want %d", n, cfg.MaxAttempts)
		}
		if len(api.Items()) != 0 {
			t.Errorf("API holds items %+v, want none", api.Items())
		}
		if got := testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)); got != 1 {
			t.Errorf("dead_letters_total = %v, want 1", got)
		}
	})
	t.Run("lookup failure retried", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		api := newLookupAPI("desk")
		id := e.createAttempted(t, api.name)
		var lookups atomic.Int32
		api.findHook = func(context.Context, downstream.Delivery) error {
			if lookups.Add(1) == 1 {
				return transient(503, "search unavailable")
			}
			return nil
		}
		e.startForwarder(t, testConfig(), api)
		e.waitStatus(t, id, ledger.StatusDelivered)
		if n := len(api.Finds()); n != 2 {
			t.Errorf("%d lookups, want 2", n)
		}
		if n := len(api.Calls()); n != 1 {
			t.Errorf("%d create calls, want 1 (after the lookup proved absence)", n)
		}
	})
}

// A lookup refused for good cannot prove the earlier attempt's outcome on
// any retry: the request goes uncertain, and nothing is resent.
func TestPermanentLookupFailureIsUncertain(t *testing.T) {
	t.Parallel()
	for name, lookupErr := range map[string]error{
		"auth":      &downstream.Error{Class: downstream.Auth, StatusCode: 401, Err: errors.New("bad key")},
		"not found": &downstream.Error{Class: downstream.Permanent, StatusCode: 404, Err: errors.New("no such project")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			api := newLookupAPI("desk")
			id := e.createAttempted(t, api.name)
			api.findHook = func(context.Context, downstream.Delivery) error { return lookupErr }
			e.startForwarder(t, testConfig(), api)
			st := e.waitStatus(t, id, ledger.StatusUncertain)
			if !strings.Contains(st.LastError, "lookup") {
				t.Errorf("last error %q does not say the lookup failed", st.LastError)
			}
			if n := len(api.Calls()); n != 0 {
				t.Errorf("%d create calls, want none", n)
			}
			if n := len(api.Finds()); n != 1 {
				t.Errorf("%d lookups, want 1 (a refused lookup is not retried)", n)
			}
		})
	}
}

// A message for a request already settled (an ack lost, a republish after
// the duplicate window) is acknowledged without calling the API.
func TestRedeliveryOfSettledRequestSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	before := e.waitStatus(t, id, ledger.StatusDelivered)
	e.waitConsumerIdle(t, api.name)

	// The same ticket again, under another Nats-Msg-Id so JetStream keeps it.
	e.publishRaw(t, outbox.SubjectFor(api.name), id+"#again", e.payload(t, id))
	stream, err := e.js.Stream(context.Background(), "TICKETS")
	if err != nil {
		t.Fatal(err)
	}
	si, err := stream.Info(context.Background())
	if err != nil || si.State.Msgs != 2 {
		t.Fatalf("stream info %+v (err %v), want 2 messages", si, err)
	}
	waitFor(t, 15*time.Second, "the redelivery to be skipped", func() bool {
		return testutil.ToFloat64(e.m.RedeliveredSkipped.WithLabelValues(api.name)) == 1
	})
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
	after := e.find(t, id)
	if after.Status != ledger.StatusDelivered || after.ExternalID != before.ExternalID || after.Attempts != 1 {
		t.Errorf("status after the redelivery %+v, want unchanged %+v", after, before)
	}
}

// A message whose request the ledger does not hold (pruned after it was
// settled, a replayed stream) is acknowledged without calling the API.
func TestMessageForUnknownRequestSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	tk := ticket.Ticket{
		Request: ticket.Request{RequestID: "never-accepted-1", Tool: "create_ticket", Target: api.name, Title: "ghost", Priority: "normal"},
		ID:      ticket.IDFor("never-accepted-1"), CreatedAt: time.Now().UTC(),
	}
	data, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, outbox.SubjectFor(api.name), tk.RequestID, data)
	waitFor(t, 15*time.Second, "the message to be skipped", func() bool {
		return testutil.ToFloat64(e.m.RedeliveredSkipped.WithLabelValues(api.name)) == 1
	})
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 0 {
		t.Errorf("%d calls for a request the ledger never accepted, want 0", n)
	}
	if _, found, err := e.l.Delivery(context.Background(), tk.RequestID); err != nil || found {
		t.Errorf("delivery record for the unknown request: found %v err %v", found, err)
	}
}

func TestSlowTargetDoesNotHoldUpAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow, fast := newKeyedAPI("slow"), newKeyedAPI("fast")
	held := newGate(t)
	slow.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	cfg := testConfig()
	cfg.Workers = 1 // the slow target's only worker is stuck
	e.startForwarder(t, cfg, slow, fast)
	slowID := e.create(t, slow.name)
	held.WaitArrived(t)

	var fastIDs []string
	for range 3 {
		fastIDs = append(fastIDs, e.create(t, fast.name))
	}
	for _, id := range fastIDs {
		e.waitStatus(t, id, ledger.StatusDelivered)
	}
	if st := e.find(t, slowID); st.Status == ledger.StatusDelivered {
		t.Fatalf("slow ticket delivered while its call is held: %+v", st)
	}
	held.Open()
	e.waitStatus(t, slowID, ledger.StatusDelivered)
	if len(slow.Calls()) != 1 || len(fast.Calls()) != 3 {
		t.Errorf("calls: slow %d fast %d, want 1 and 3", len(slow.Calls()), len(fast.Calls()))
	}
}

func TestShutdownFinishesInFlightDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	held := newGate(t)
	api.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	stop := e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	held.WaitArrived(t)

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a delivery was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	held.Open()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after the in-flight delivery finished")
	}
	// Recorded before Run returned: no waiting here.
	st := e.find(t, id)
	if st.Status != ledger.StatusDelivered {
		t.Errorf("after shutdown: %+v, want delivered", st)
	}
	calls := api.Calls()
	if len(calls) != 1 || calls[0].CtxErr != nil {
		t.Errorf("calls %+v: want one call whose context was not cancelled by the shutdown", calls)
	}
	// Acked: a new forwarder has nothing to do.
	e.waitConsumerIdle(t, api.name)
}

func TestUndecodableMessageTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	e.publishRaw(t, outbox.SubjectFor(api.name), "", []byte("{garbage"))
	e.publishRaw(t, outbox.SubjectFor(api.name), "", []byte(`{"title":"no request id"}`))

	waitFor(t, 15*time.Second, "two dead letters", func() bool {
		return testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)) == 2
	})
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 0 {
		t.Errorf("%d calls for undecodable messages, want 0", n)
	}
	// The consumer goes on with good messages.
	id := e.create(t, api.name)
	e.waitStatus(t, id, ledger.StatusDelivered)
}

// Without -workers, each target gets its own concurrency: the local target
// asks for more (downstream.Parallel), an API gets the default. The
// consumer's MaxAckPending follows (4 per worker).
func TestWorkersPerTarget(t *testing.T) {
	t.Parallel()
	lt, err := local.Open("files", filepath.Join(t.TempDir(), "tickets.jsonl"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	api := newKeyedAPI("desk")
	for _, tc := range []struct {
		workers         int
		local, apiLimit int
	}{
		{0, 4 * lt.Workers(), 4 * forwarder.DefaultWorkers},
		{3, 12, 12},
	} {
		e := newEnv(t)
		cfg := testConfig()
		cfg.Workers = tc.workers
		stop := e.startForwarder(t, cfg, lt, api)
		for name, want := range map[string]int{lt.Name(): tc.local, api.name: tc.apiLimit} {
			var got int
			testwait.For(t, 10*time.Second, "consumer "+forwarder.ConsumerName(name), func() bool {
				c, err := e.js.Consumer(context.Background(), "TICKETS", forwarder.ConsumerName(name))
				if err != nil {
					return false
				}
				got = c.CachedInfo().Config.MaxAckPending
				return true
			})
			if got != want {
				t.Errorf("-workers %d: %s MaxAckPending = %d, want %d", tc.workers, name, got, want)
			}
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// A dispatcher stopped while it is still starting (creating its consumers)
// stops cleanly: Run returns nil, as it does once running.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("desk")
	for i := range 10 {
		f := forwarder.New(testConfig(), e.js, e.l, []downstream.Target{api}, e.log, e.m, time.Now)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: Run = %v after cancellation, want nil", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: Run did not return after cancellation", i)
		}
	}
}
