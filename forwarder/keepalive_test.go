package forwarder_test

import (
	"context"
	"testing"
	"time"

	"ticketrelay/downstream"
	"ticketrelay/internal/testwait"
	"ticketrelay/ledger"
)

// A call that outlasts the consumer's AckWait keeps its message (InProgress)
// instead of letting JetStream hand it to another worker for a second call.
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
	// redeliver the message to the idle worker, which would call again.
	testwait.Holds(t, 5*cfg.AckWait, "one call while the first is in progress", func() bool { return len(api.Calls()) == 1 })
	held.Open()
	e.waitStatus(t, id, ledger.StatusDelivered)
	if n := len(api.Calls()); n != 1 {
		t.Fatalf("%d calls in all, want 1", n)
	}
}
