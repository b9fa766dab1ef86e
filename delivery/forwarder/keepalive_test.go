package forwarder_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/request"
	"ticketrelay/testkit/testwait"
)

// A call that outlasts the consumer's AckWait keeps its message (InProgress)
// instead of letting JetStream hand it to another worker for a second call.
// The proof is in JetStream itself: this process's busy map would turn a
// redelivered copy away before it reached the API, so counting calls alone
// cannot tell whether the message was redelivered.
func TestSlowDeliveryIsNotRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("slowpoke")
	held := newGate(t)
	api.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	cfg := testConfig()
	// Long enough that a keep-alive a busy box delays by a second still
	// comes before the deadline: the test is about the inbox extending
	// queued messages at all, not about its timing.
	cfg.AckWait = 1500 * time.Millisecond
	cfg.Workers = 2 // a second worker would take a redelivered message
	e.startForwarder(t, cfg, api)
	id := e.create(t, api.name)
	held.WaitArrived(t)
	// Hold the call for five AckWaits: without InProgress JetStream would
	// redeliver the message (NumRedelivered, a second consumer delivery),
	// and the idle worker would take it.
	var state string
	redelivered := testwait.Until(5*cfg.AckWait, func() bool {
		info := e.consumerInfo(t, api.name)
		state = fmt.Sprintf("consumer deliveries %d, redelivered %d, ack pending %d, calls %d",
			info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending, len(api.Calls()))
		return info.Delivered.Consumer != 1 || info.NumRedelivered != 0 || info.NumAckPending != 1 || len(api.Calls()) != 1
	})
	if redelivered {
		t.Fatalf("while the first call was held past AckWait: %s; want 1 delivery, 0 redelivered, 1 pending, 1 call", state)
	}
	held.Open()
	e.waitStatus(t, id, request.StatusDelivered)
	if n := len(api.Calls()); n != 1 {
		t.Fatalf("%d calls in all, want 1", n)
	}
}

// consumerInfo is the JetStream state of target's consumer.
func (e *env) consumerInfo(t *testing.T, target string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, "TICKETS", forwarder.ConsumerName(target))
	if err != nil {
		t.Fatalf("consumer of %s: %v", target, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info of %s: %v", target, err)
	}
	return info
}

// Messages pulled ahead of the workers keep their ack deadline while they
// wait: with every worker held by a call for several AckWaits, the
// messages queued behind them are not redelivered (a redelivered copy
// would take a slot of its own and be handed back, again and again), and
// each request is delivered once.
func TestQueuedMessagesAreNotRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("backlog")
	held := newGate(t)
	api.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	cfg := testConfig()
	// Long enough that a keep-alive a busy box delays by a second still
	// comes before the deadline: the test is about the inbox extending
	// queued messages at all, not about its timing.
	cfg.AckWait = 1500 * time.Millisecond
	cfg.Workers = 2
	// The workers' messages and two queued behind them, with room for two
	// more: the inbox's pull stays open, and JetStream would redeliver into
	// it a queued message whose deadline passed.
	const n = 4
	var ids []string
	for range n {
		ids = append(ids, e.create(t, api.name))
	}
	e.startForwarder(t, cfg, api)
	waitFor(t, 15*time.Second, "every message to be pulled and both workers to be calling", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := e.js.Consumer(ctx, "TICKETS", forwarder.ConsumerName(api.name))
		if err != nil {
			return false // not created yet
		}
		info, err := c.Info(ctx)
		return err == nil && info.Delivered.Consumer == n && len(api.Calls()) == cfg.Workers
	})
	var state string
	redelivered := testwait.Until(5*cfg.AckWait, func() bool {
		info := e.consumerInfo(t, api.name)
		state = fmt.Sprintf("consumer deliveries %d, redelivered %d, ack pending %d, calls %d",
			info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending, len(api.Calls()))
		return info.Delivered.Consumer != n || info.NumRedelivered != 0 || info.NumAckPending != n || len(api.Calls()) != cfg.Workers
	})
	if redelivered {
		t.Fatalf("while the calls were held past AckWait: %s; want %d deliveries, 0 redelivered, %d pending, %d calls",
			state, n, n, cfg.Workers)
	}
	held.Open()
	for _, id := range ids {
		e.waitStatus(t, id, request.StatusDelivered)
	}
	if c := len(api.Calls()); c != n {
		t.Fatalf("%d calls for %d requests", c, n)
	}
}
