package outbox_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/request"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/fixture"
)

// hookPublisher publishes for real and runs before (once, as the batch is
// sent) and after (once, between the stream's acks and the relay's mark).
type hookPublisher struct {
	p             outbox.Publisher
	before, after func()
	once1, once2  sync.Once
}

func (h *hookPublisher) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	if h.before != nil {
		h.once1.Do(h.before)
	}
	res := h.p.Publish(ctx, msgs)
	if h.after != nil {
		h.once2.Do(h.after)
	}
	return res
}

// TestRelayStopFinishesTheBatchInFlight: the relay is told to stop (SIGTERM)
// while a batch waits for its acks. The stream stores the batch whatever the
// relay does, so the relay must wait for the acks and mark the rows; left
// unmarked they would be published again at the next start, and stored
// twice after a stop longer than the duplicate window.
func TestRelayStopFinishesTheBatchInFlight(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	n := newNodeWith(t, "relay-a", path, &hookPublisher{p: natsjs.NewPublisher(js), before: stop}, outbox.RelayConfig{}, time.Now)
	all := ids("req", 50)
	n.create(t, all...)
	if err := n.relay.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil on cancellation", err)
	}
	if got := backlog(t, fixture.Raw(t, path)); got != 0 {
		t.Errorf("%d of 50 rows left unmarked by a clean stop", got)
	}
	if got := countMsgs(streamMessages(t, js)); got != len(all) {
		t.Errorf("stream holds %d messages, want %d", got, len(all))
	}
}

// TestRelayMarksOnlyTheGenerationItSent: an operator redrives a request
// between the stream's ack of its message and the relay's mark. The mark
// is for the generation that was sent; the redriven one must still go out.
func TestRelayMarksOnlyTheGenerationItSent(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	h := &hookPublisher{p: natsjs.NewPublisher(js)}
	n := newNodeWith(t, "relay-a", path, h, outbox.RelayConfig{}, time.Now)
	n.create(t, "req-1")
	h.after = func() {
		// The forwarder failed the first generation for good; an operator
		// redrives it.
		ctx := context.Background()
		if err := n.l.RecordDelivery(ctx, request.Delivery{RequestID: "req-1", Target: "local", State: string(request.StatusFailed), Attempts: 1}); err != nil {
			t.Error(err)
		}
		if err := n.l.Redrive(ctx, "req-1"); err != nil {
			t.Error(err)
		}
	}
	n.run(t)
	db := fixture.Raw(t, path)
	waitFor(t, 10*time.Second, "both generations in the stream and nothing pending", func() bool {
		return backlog(t, db) == 0 && countMsgs(streamMessages(t, js)) == 2
	})
}
