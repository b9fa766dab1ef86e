package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/store/outbox"
)

// A stream that goes while messages are on their way can swallow some
// without an answer, and refuse others ("no stream"). Here no stream holds
// the installation's subjects: target "swallow" has a subscriber that
// never answers, target "none" nobody. The ack timeout is a minute, so a
// publish that waited for it would outlast every wait of these tests.

const noStream = installation.Name("abandon")

// swallower subscribes to the swallow target without ever answering and
// reports each message it got.
func swallower(t *testing.T, nc *nats.Conn) <-chan struct{} {
	t.Helper()
	got := make(chan struct{}, 16)
	sub, err := nc.Subscribe(noStream.Subject("swallow"), func(*nats.Msg) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

func msg(id, target string) outbox.Message {
	return outbox.Message{RequestID: id, Subject: "tickets." + target, Payload: []byte(id)}
}

func within(t *testing.T, d time.Duration, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(d):
		t.Fatalf("%s: nothing after %s", what, d)
	}
}

// publishSlowAcks connects with an ack timeout of a minute and the async
// error handler of the StreamGone it returns.
func publishSlowAcks(t *testing.T) (*nats.Conn, jetstream.JetStream, *natsjs.StreamGone) {
	t.Helper()
	gone := natsjs.NewStreamGone()
	nc, js := connect(t, start(t, t.TempDir()), jetstream.WithPublishAsyncTimeout(time.Minute), jetstream.WithPublishAsyncErrHandler(gone.Handler))
	return nc, js, gone
}

// A message answered "no stream" ends the wait for the unanswered one sent
// before it, in the same batch and in another batch in flight.
func TestNoStreamAbandonsTheWaitForMessagesSentBefore(t *testing.T) {
	nc, js, gone := publishSlowAcks(t)
	got := swallower(t, nc)
	pub := natsjs.NewPublisher(js, natsjs.ForInstallation(noStream), natsjs.AbandonOn(gone))
	ctx := ctxT(t)

	res := pub.Publish(ctx, []outbox.Message{msg("swallowed-1", "swallow"), msg("refused-1", "none")})
	if !errors.Is(res[1].Err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("refused-1: %v, want no stream", res[1].Err)
	}
	if !errors.Is(res[0].Err, natsjs.ErrAbandoned) {
		t.Fatalf("swallowed-1, sent with a refused message: %v, want ErrAbandoned", res[0].Err)
	}

	first := make(chan []outbox.PublishResult, 1)
	go func() { first <- pub.Publish(ctx, []outbox.Message{msg("swallowed-2", "swallow")}) }()
	within(t, 10*time.Second, "the swallower", got) // swallowed-1
	within(t, 10*time.Second, "the swallower", got) // swallowed-2
	if res := pub.Publish(ctx, []outbox.Message{msg("refused-2", "none")}); !errors.Is(res[0].Err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("refused-2: %v, want no stream", res[0].Err)
	}
	select {
	case res := <-first:
		if !errors.Is(res[0].Err, natsjs.ErrAbandoned) {
			t.Fatalf("swallowed-2, in flight when another batch was refused: %v, want ErrAbandoned", res[0].Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("swallowed-2 still waits for its answer after a later message found no stream")
	}

	// Later publishes wait again.
	late := make(chan []outbox.PublishResult, 1)
	lctx, cancel := context.WithCancel(ctx)
	go func() { late <- pub.Publish(lctx, []outbox.Message{msg("swallowed-3", "swallow")}) }()
	within(t, 10*time.Second, "the swallower", got)
	select {
	case res := <-late:
		t.Fatalf("swallowed-3 did not wait for its answer: %+v", res[0])
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if res := <-late; !errors.Is(res[0].Err, context.Canceled) {
		t.Fatalf("swallowed-3: %v, want its context's end", res[0].Err)
	}
}

// The commit of an atomic batch is abandoned the same way; the batch then
// goes again message by message.
func TestNoStreamAbandonsTheWaitForAnAtomicCommit(t *testing.T) {
	nc, js, gone := publishSlowAcks(t)
	got := swallower(t, nc)
	fallback := make(chan error, 1)
	pub := natsjs.NewPublisher(js, natsjs.ForInstallation(noStream), natsjs.MinAtomicBatch(2), natsjs.AbandonOn(gone),
		natsjs.AtomicBatches(func(err error) { fallback <- err }))
	ctx := ctxT(t)
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Publish(bctx, []outbox.Message{msg("batch-1", "swallow"), msg("batch-2", "swallow")})
	}()
	within(t, 10*time.Second, "the swallower", got)
	within(t, 10*time.Second, "the swallower", got) // the commit
	if res := pub.Publish(ctx, []outbox.Message{msg("refused", "none")}); !errors.Is(res[0].Err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("refused: %v, want no stream", res[0].Err)
	}
	select {
	case err := <-fallback:
		if !errors.Is(err, natsjs.ErrAbandoned) {
			t.Fatalf("the atomic batch fell back for %v, want ErrAbandoned", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the atomic commit still waits after a later message found no stream")
	}
	cancel()
	<-done
}
