package forwarder_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/request"
)

// A downstream that is down for a long while (compressed here with fast
// retries): tickets keep being accepted, none is lost or failed, retries are
// visible, and once it is back every ticket is delivered exactly once.
func TestLongOutageLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	var down atomic.Bool
	down.Store(true)
	api.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		if down.Load() {
			return failBefore, transient(503, "service unavailable")
		}
		return act, nil
	}
	cfg := testConfig()
	cfg.MaxAttempts = 10000 // the outage must not exhaust attempts
	e.startForwarder(t, cfg, api)

	const n = 40
	ids := make([]string, 0, n)
	for range n {
		ids = append(ids, e.create(t, api.name)) // accepting never depends on the downstream
	}
	// The tickets in flight (MaxAckPending of them) are retried again and
	// again; the rest wait their turn in the stream. None fails, none is lost.
	waitFor(t, 20*time.Second, "tickets retried several times while the downstream is down", func() bool {
		retried := 0
		for _, id := range ids {
			switch st := e.find(t, id); st.Status {
			case request.StatusRetrying:
				if st.Attempts >= 3 {
					retried++
				}
			case request.StatusQueued, request.StatusPublished:
			default:
				t.Fatalf("%s is %s during the outage: %+v", id, st.Status, st)
			}
		}
		return retried >= cfg.Workers
	})
	if len(api.Items()) != 0 {
		t.Fatalf("%d items created while the downstream was down", len(api.Items()))
	}
	for _, id := range ids {
		if st := e.find(t, id); st.Status == request.StatusRetrying && (st.LastError == "" || st.NextAttemptAt == nil) {
			t.Errorf("retrying status lacks the last error or next attempt: %+v", st)
		}
	}

	down.Store(false)
	for _, id := range ids {
		e.waitStatus(t, id, request.StatusDelivered)
	}
	items := api.Items()
	if len(items) != n {
		t.Fatalf("%d items after recovery, want %d", len(items), n)
	}
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.Key] {
			t.Errorf("key %s created twice", it.Key)
		}
		seen[it.Key] = true
	}
	e.waitConsumerIdle(t, api.name)
}
