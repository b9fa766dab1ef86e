package natsjs

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/outbox"
)

// Publisher publishes outbox rows asynchronously, with Nats-Msg-Id set to
// the request id (outbox.Message.MsgID), and waits for all acknowledgements of a batch.
type Publisher struct {
	js        jetstream.JetStream
	stallWait time.Duration
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher wraps js. js must be created with
// jetstream.WithPublishAsyncMaxPending ≥ the relay's batch size × pipeline
// depth (else a publish waits up to 5 s for room, then fails) and with
// jetstream.WithPublishAsyncTimeout: Publish waits for every ack until ctx
// ends, so without an ack timeout one lost ack would stall the relay.
func NewPublisher(js jetstream.JetStream) *Publisher {
	return &Publisher{js: js, stallWait: 5 * time.Second}
}

// Publish implements outbox.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	results := make([]outbox.PublishResult, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm := &nats.Msg{Subject: m.Subject, Data: m.Payload, Header: nats.Header{}}
		nm.Header.Set(jetstream.MsgIDHeader, m.MsgID())
		f, err := p.js.PublishMsgAsync(nm, jetstream.WithStallWait(p.stallWait))
		if err != nil {
			results[i].Err = fmt.Errorf("natsjs: publish %s: %w", m.RequestID, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			results[i].Duplicate = ack.Duplicate
		case err := <-f.Err():
			results[i].Err = fmt.Errorf("natsjs: publish %s: %w", msgs[i].RequestID, err)
		case <-ctx.Done():
			results[i].Err = fmt.Errorf("natsjs: publish %s: %w", msgs[i].RequestID, ctx.Err())
		}
	}
	return results
}
