package forwarder_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/request"
	"ticketrelay/store/outbox"
)

// Two copies of one message can be handled at once: JetStream redelivers a
// message whose ack deadline passed while it waited in the client's buffer
// or while its record committed, and the relay publishes a request again
// under a new message id once the duplicate window forgot it. Toward a
// target without a dedupe key, only one copy may call.

// TestSecondCopyWaitsForTheFirst: a copy that arrives while this forwarder
// is still calling the downstream for the first neither looks the request
// up (the running create is not visible yet) nor calls; once the first is
// recorded, the copy is skipped.
func TestSecondCopyWaitsForTheFirst(t *testing.T) {
	e := newEnv(t)
	api := newLookupAPI("redmine")
	g := newGate(t)
	api.hook = func(ctx context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		if n == 1 {
			g.Wait(ctx)
		}
		return act, nil
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	g.WaitArrived(t)
	e.publishRaw(t, outbox.SubjectFor(api.name), id+"-again", e.payload(t, id))
	// Both copies have reached the forwarder (the second one maybe several
	// times) while the first call is held.
	waitFor(t, 15*time.Second, "the second copy to reach the forwarder", func() bool {
		c, err := e.js.Consumer(context.Background(), "TICKETS", "deliver-"+api.name)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.Delivered.Consumer >= 2
	})
	g.Open()
	st := e.waitStatus(t, id, request.StatusDelivered)
	e.waitConsumerIdle(t, api.name)
	if calls, finds, items := len(api.Calls()), len(api.Finds()), len(api.Items()); calls != 1 || finds != 0 || items != 1 {
		t.Fatalf("%d calls, %d lookups, %d items for one request; want 1, 0, 1", calls, finds, items)
	}
	if st.ExternalID != api.Items()[0].Receipt.ExternalID {
		t.Errorf("recorded %q, created %q", st.ExternalID, api.Items()[0].Receipt.ExternalID)
	}
}

// TestClaimOfARunningCallIsLeftAlone: another dispatcher claimed the request
// and is calling; its create lands half-way through its DeliveryTimeout. A
// copy here must not look the request up (and, finding nothing, create it
// again) before that call has certainly ended; then its lookup finds the
// item the other call made.
func TestClaimOfARunningCallIsLeftAlone(t *testing.T) {
	e := newEnv(t)
	api := newLookupAPI("redmine")
	cfg := testConfig()
	cfg.DeliveryTimeout = 1500 * time.Millisecond
	claimed := time.Now()
	id := e.createClaimed(t, api.name, claimed)
	// The other dispatcher's call creates the item half-way through its
	// DeliveryTimeout. The API is asked lazily whether it exists: every
	// lookup made after that point sees it, every earlier one does not
	// (no timer has to win a race against the forwarder's first lookup).
	landed := claimed.Add(cfg.DeliveryTimeout / 2)
	var mu sync.Mutex
	var findsAt []time.Time
	seeded := false
	api.findHook = func(context.Context, downstream.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		findsAt = append(findsAt, now)
		if !seeded && !now.Before(landed) {
			api.seed(id)
			seeded = true
		}
		return nil
	}
	e.startForwarder(t, cfg, api)

	st := e.waitStatus(t, id, request.StatusDelivered)
	e.waitConsumerIdle(t, api.name)
	if calls, items := len(api.Calls()), len(api.Items()); calls != 0 || items != 1 {
		t.Fatalf("%d calls, %d items; want the other dispatcher's one item and no call from here", calls, items)
	}
	if st.ExternalID != api.Items()[0].Receipt.ExternalID {
		t.Errorf("recorded %q, the other call created %q", st.ExternalID, api.Items()[0].Receipt.ExternalID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(findsAt) == 0 {
		t.Fatal("delivered without a lookup")
	}
	for _, at := range findsAt {
		if at.Before(claimed.Add(cfg.DeliveryTimeout)) {
			t.Errorf("looked up %v after the claim, before its call could have ended (%v)", at.Sub(claimed), cfg.DeliveryTimeout)
		}
	}
}

// TestCopiesBufferedPastAckWait: every worker is held by a slow call for
// longer than AckWait, so the messages waiting in the client's buffer are
// redelivered while their first copies are still queued. Toward a target
// with neither a key nor a lookup, each request is still created at most
// once, and none is reported uncertain: no call's outcome was ever unknown.
func TestCopiesBufferedPastAckWait(t *testing.T) {
	e := newEnv(t)
	api := newUnkeyedAPI("webhook")
	cfg := testConfig()
	cfg.Workers = 4
	cfg.AckWait = time.Second
	slow := 2500 * time.Millisecond
	api.hook = func(ctx context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		if n <= cfg.Workers {
			select {
			case <-time.After(slow):
			case <-ctx.Done():
			}
		}
		return act, nil
	}
	var ids []string
	for range 24 {
		ids = append(ids, e.create(t, api.name))
	}
	e.startForwarder(t, cfg, api)
	for _, id := range ids {
		e.waitStatus(t, id, request.StatusDelivered)
	}
	e.waitConsumerIdle(t, api.name)
	perKey := map[string]int{}
	for _, it := range api.Items() {
		perKey[it.Key]++
	}
	for _, id := range ids {
		if n := perKey[id]; n != 1 {
			t.Errorf("request %s created %d times", id, n)
		}
	}
}
