package forwarder_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"ticketrelay/delivery/downstream"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// commentAPI is a keyed API that takes comments: each comment it stores
// is counted by key.
type commentAPI struct {
	*fakeAPI
	mu       sync.Mutex
	comments map[string]int // key → comments stored under it
	tickets  map[string]string
}

func (a *commentAPI) CommentCapabilities() downstream.Capabilities {
	return downstream.Capabilities{DedupeKey: true}
}

func (a *commentAPI) ParseTicket(ref string) (downstream.Receipt, error) {
	return downstream.Receipt{ExternalID: ref}, nil
}

func (a *commentAPI) AddComment(_ context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.comments[d.Key]++
	a.tickets[d.Key] = d.Ticket
	return downstream.CommentReceipt{ExternalID: "c-" + d.Key}, nil
}

// More comments wait for their ticket's create than the target's
// MaxAckPending: they are set aside in the ledger, not held by JetStream,
// so an unrelated create to the same target is still delivered promptly;
// once the create is delivered, every comment lands once, on its ticket.
// Before parking, the waiting comments' messages, handed back again and
// again, filled MaxAckPending and the unrelated create was never sent.
func TestWaitingCommentsDoNotHoldTheTarget(t *testing.T) {
	const maxAckPending, comments = 4, 12
	e := newEnv(t)
	var open atomic.Bool
	api := &commentAPI{fakeAPI: newKeyedAPI("api"), comments: map[string]int{}, tickets: map[string]string{}}
	stuck := e.create(t, "api")
	api.hook = func(_ context.Context, _ int, d downstream.Delivery) (behaviour, error) {
		if d.Ticket.RequestID == stuck && !open.Load() {
			return failBefore, transient(503, "down for maintenance")
		}
		return act, nil
	}
	var ids []string
	for range comments {
		id := uuid.NewString()
		r := ticket.Request{RequestID: id, Tool: "add_comment", Target: "api", Body: "seen again",
			Action: ticket.Action{On: stuck}}
		if err := r.NormalizeComment(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cfg := testConfig()
	cfg.MaxAckPending, cfg.MaxAttempts = maxAckPending, 1000
	e.startForwarder(t, cfg, api)

	// The unrelated create comes after the comments in the stream.
	fresh := e.create(t, "api")
	e.waitStatus(t, fresh, request.StatusDelivered)
	if st := e.find(t, stuck).Status; st != request.StatusRetrying {
		t.Fatalf("the stuck create is %s, want still retrying", st)
	}
	waitFor(t, 30*time.Second, "every comment set aside", func() bool {
		var n int
		if err := e.db.Reader().QueryRow(`SELECT count(*) FROM waiting`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == comments
	})

	open.Store(true)
	receipt := e.waitStatus(t, stuck, request.StatusDelivered)
	for _, id := range ids {
		e.waitStatus(t, id, request.StatusDelivered)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.comments) != comments {
		t.Errorf("%d comments stored, want %d", len(api.comments), comments)
	}
	for key, n := range api.comments {
		if n != 1 || api.tickets[key] != receipt.ExternalID {
			t.Errorf("comment %s: stored %d times on %q; want once on %q", key, n, api.tickets[key], receipt.ExternalID)
		}
	}
	var left int
	if err := e.db.Reader().QueryRow(`SELECT count(*) FROM waiting`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d requests still parked (%v)", left, errors.Join(err))
	}
}
