package forwarder_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream"
	"ticketrelay/front/mcptools"
	"ticketrelay/request"
)

// Targets without a dedupe key: record before the call, reconcile by a
// consistent lookup or go uncertain, never resend blindly.

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

	st := e.waitStatus(t, id, request.StatusUncertain)
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
	st := e.waitStatus(t, id, request.StatusDelivered)
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
	if st := e.find(t, id); st.Status != request.StatusPublished || !st.InProgress {
		t.Fatalf("before the forwarder: %+v, want an attempt in progress", st)
	}
	e.startForwarder(t, testConfig(), api)

	st := e.waitStatus(t, id, request.StatusUncertain)
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

		st := e.waitStatus(t, id, request.StatusDelivered)
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

		st := e.waitStatus(t, id, request.StatusDelivered)
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

		st := e.waitStatus(t, id, request.StatusDelivered)
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

		var st mcptools.RequestStatus
		waitFor(t, 15*time.Second, "the request to fail or the API to get more than MaxAttempts calls", func() bool {
			st = e.find(t, id)
			return st.Status == request.StatusFailed || len(api.Calls()) > cfg.MaxAttempts
		})
		if st.Status != request.StatusFailed || !strings.Contains(st.LastError, "attempts exhausted") {
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
		e.waitStatus(t, id, request.StatusDelivered)
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
			st := e.waitStatus(t, id, request.StatusUncertain)
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

// The claim ("attempting") toward a target without a key is durable before
// the call starts: while the call is held in the API, find_request already
// answers that attempt 1 is in progress. A crash during the call leaves
// exactly this record, which the next delivery reconciles instead of
// resending.
func TestUnkeyedClaimIsDurableBeforeTheCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newUnkeyedAPI("webhook")
	held := newGate(t)
	api.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	held.WaitArrived(t)

	st := e.find(t, id)
	if st.Status != request.StatusPublished || !st.InProgress || st.Attempts != 1 {
		t.Fatalf("during the call: %+v; want published, in progress, attempt 1", st)
	}
	d, found, err := e.l.Delivery(context.Background(), id)
	if err != nil || !found || d.State != request.DeliveryAttempting || d.Attempts != 1 || !d.NextAttemptAt.IsZero() {
		t.Fatalf("delivery record during the call: %+v, found %v, %v; want a claim of attempt 1", d, found, err)
	}
	held.Open()
	st = e.waitStatus(t, id, request.StatusDelivered)
	if st.Attempts != 1 || len(api.Calls()) != 1 {
		t.Errorf("after the call: %+v, %d calls; want delivered by one call", st, len(api.Calls()))
	}
}

// The claim is conditional: a copy whose claim is refused because another
// dispatcher claimed the request first (between this copy's read and its
// write) must not call. Here the other dispatcher claims while this one is
// looking up a crashed attempt; its call then creates the item, which this
// one finds once that call has certainly ended.
func TestUnkeyedRefusedClaimDoesNotCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newLookupAPI("desk")
	id := e.createAttempted(t, api.name)
	var lookups atomic.Int32
	claimErr := make(chan error, 1)
	api.findHook = func(ctx context.Context, d downstream.Delivery) error {
		switch lookups.Add(1) {
		case 1:
			// The other dispatcher reads the record and claims attempt 2.
			prev, _, err := e.l.Delivery(ctx, id)
			if err == nil {
				err = e.l.RecordDelivery(ctx, request.Delivery{RequestID: id, Target: api.name,
					State: request.DeliveryAttempting, Attempts: prev.Attempts + 1, Version: prev.Version})
			}
			claimErr <- err
		case 2:
			// By the next lookup the other dispatcher's call has ended;
			// it created the item.
			api.seed(id)
		}
		return nil
	}
	cfg := testConfig()
	cfg.DeliveryTimeout = 300 * time.Millisecond // the wait for the other call to end
	e.startForwarder(t, cfg, api)

	st := e.waitStatus(t, id, request.StatusDelivered)
	if err := <-claimErr; err != nil {
		t.Fatalf("the other dispatcher's claim: %v", err)
	}
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 0 {
		t.Errorf("%d create calls after the claim was refused, want 0", n)
	}
	if items := api.Items(); len(items) != 1 || st.ExternalID != items[0].Receipt.ExternalID {
		t.Errorf("items %+v, status %+v; want the other dispatcher's one item", items, st)
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d lookups, want 2", n)
	}
}
