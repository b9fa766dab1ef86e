package forwarder_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/downstream"
	"ticketrelay/forwarder"
	"ticketrelay/internal/testwait"
	"ticketrelay/ledger"
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
	cfg.AckWait = 600 * time.Millisecond
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
	e.waitStatus(t, id, ledger.StatusDelivered)
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
