package forwarder_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/downstream"
	"ticketrelay/forwarder"
	"ticketrelay/ledger"
)

// Requests waiting out a long Retry-After stay among their target's
// unacknowledged messages; they must not hold up the target's other
// requests, however many there are.
func TestRetryingRequestsDoNotBlockTheTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	var refuse atomic.Bool
	refuse.Store(true)
	api.hook = func(context.Context, int, downstream.Delivery) (behaviour, error) {
		if refuse.Load() {
			return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 503, RetryAfter: time.Hour, Err: errors.New("come back in an hour")}
		}
		return act, nil
	}
	cfg := testConfig()
	cfg.Workers = 2 // the consumer's limit was 4×workers
	e.startForwarder(t, cfg, api)
	var waiting []string
	for range 12 {
		waiting = append(waiting, e.create(t, api.name))
	}
	for _, id := range waiting {
		e.waitStatus(t, id, ledger.StatusRetrying)
	}
	refuse.Store(false)
	e.waitStatus(t, e.create(t, api.name), ledger.StatusDelivered)
}

// The wait an API asks for is capped: a Retry-After far in the future must
// neither overflow the retry time nor park the request for ever.
func TestRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	api.hook = func(context.Context, int, downstream.Delivery) (behaviour, error) {
		return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 503, RetryAfter: 100 * 365 * 24 * time.Hour, Err: errors.New("come back in a century")}
	}
	e.startForwarder(t, testConfig(), api)
	before := time.Now()
	id := e.create(t, api.name)
	st := e.waitStatus(t, id, ledger.StatusRetrying)
	if st.NextAttemptAt == nil || st.NextAttemptAt.Before(before) || st.NextAttemptAt.After(time.Now().Add(24*time.Hour+time.Minute)) {
		t.Fatalf("next_attempt_at %v: want within a day of now", st.NextAttemptAt)
	}
}

// A consumer deleted while the forwarder runs is created again: its target
// does not go quiet until the next restart.
func TestDeletedConsumerIsCreatedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	e.waitStatus(t, e.create(t, api.name), ledger.StatusDelivered)
	if err := e.js.DeleteConsumer(context.Background(), "TICKETS", forwarder.ConsumerName(api.name)); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, e.create(t, api.name), ledger.StatusDelivered)
	if n := len(api.Calls()); n != 2 {
		t.Errorf("%d calls, want 2: the first request is settled and must not be sent again", n)
	}
}
