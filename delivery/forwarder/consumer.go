package forwarder

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/backoff"
)

// startConsumer creates target name's consumer, waiting out a cluster that
// does not answer (a leader election, a node cut off as the dispatcher
// starts); a configuration the server refuses is final.
func (f *Forwarder) startConsumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	pace := backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cons, err := f.consumer(cctx, name)
		cancel()
		var api *jetstream.APIError
		if err == nil || ctx.Err() != nil || (errors.As(err, &api) && api.Code == 400) {
			return cons, err
		}
		f.log.Warn("forwarder: the server did not create the target's consumer; retrying", "target", name, "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pace.Delay(attempt)):
		}
	}
}

// consumer creates (or updates) the durable consumer of target name.
func (f *Forwarder) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	cons, err := f.js.CreateOrUpdateConsumer(ctx, f.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       ConsumerName(name),
		Description:   "ticketrelay forwarder for target " + name,
		FilterSubject: f.cfg.Installation.Subject(name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		// Short, so that messages a crashed dispatcher had pulled come
		// back soon; a live delivery keeps its message with InProgress.
		AckWait: f.cfg.AckWait,
		// The forwarder counts attempts itself (in the ledger, across
		// crashes) and terminates the message when they are exhausted.
		MaxDeliver:    -1,
		MaxAckPending: f.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("forwarder: consumer for %s: %w", name, err)
	}
	return cons, nil
}

// runTarget delivers t's messages until ctx ends. If the consumer goes away
// meanwhile (deleted by an operator or a tool, or the stream reset), its
// iterator closes: the consumer is created again, rather than the target
// going quiet until the next restart. A new consumer starts from the first
// message of the stream; the ledger turns the settled ones away.
func (f *Forwarder) runTarget(ctx context.Context, t downstream.Target, cons jetstream.Consumer) error {
	pace := backoff.Policy{Base: 200 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 0; ; {
		if err := f.consume(ctx, t, cons); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		f.log.Error("forwarder: the target's consumer is gone; creating it again", "target", t.Name())
		// nats-server tells a deleted consumer's pulls before it removes
		// the consumer's files: one created again under the same name at
		// once lost its files to that removal (its next update failed
		// with "meta.inf.tmp: no such file or directory").
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(consumerSettle):
		}
		for {
			var err error
			if cons, err = f.consumer(ctx, t.Name()); err == nil {
				attempt = 0
				f.metrics.StreamRepairs.WithLabelValues("consumer_missing").Inc()
				f.log.Warn("forwarder: the target's consumer was created again; it delivers what the stream holds (settled requests are skipped)",
					"target", t.Name())
				break
			}
			attempt++
			f.log.Warn("forwarder: could not create the consumer again; retrying", "target", t.Name(), "err", err, "attempt", attempt)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pace.Delay(attempt)):
			}
		}
	}
}

// checkConsumer calls stop if cons is gone, so that runTarget creates the
// consumer again. The server tells a pull that was waiting when the
// consumer was deleted; a client that was disconnected at that moment is
// never told, and its pulls to a consumer that no longer exists fail
// quietly for ever. A consumer whose configuration was changed (by anyone
// who reaches the broker's API) is set back. It returns when done is
// closed.
func (f *Forwarder) checkConsumer(ctx context.Context, t downstream.Target, cons jetstream.Consumer, stop func(), done <-chan struct{}) {
	tick := time.NewTicker(f.cfg.ConsumerCheck)
	defer tick.Stop()
	want := cons.CachedInfo().Config
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := cons.Info(cctx)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			f.log.Error("forwarder: the target's consumer no longer exists", "target", t.Name(), "err", err)
			stop()
			return
		case err == nil && !sameConsumerConfig(info.Config, want):
			f.metrics.StreamRepairs.WithLabelValues("consumer_config").Inc()
			f.log.Error("forwarder: the target's consumer configuration was changed under the dispatcher; setting it back", "target", t.Name())
			if c, err := f.consumer(ctx, t.Name()); err != nil {
				f.log.Warn("forwarder: could not set the consumer's configuration back; trying again", "target", t.Name(), "err", err)
			} else {
				want = c.CachedInfo().Config
			}
		}
	}
}

// sameConsumerConfig compares two consumer configurations as the server
// stores them, but for the metadata the server writes itself.
func sameConsumerConfig(a, b jetstream.ConsumerConfig) bool {
	a.Metadata, b.Metadata = nil, nil
	return reflect.DeepEqual(a, b)
}
