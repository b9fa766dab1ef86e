package torture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream faults the scheduler makes (Event.Detail of KindStream).
const (
	StreamDelete = "delete"
	StreamPurge  = "purge"
)

// streamFault deletes or purges the installation's stream through the
// JetStream API, as an operator's nats CLI would, and records it. A broker
// still starting is given a few seconds; one that does not answer, or a
// stream that is not there (deleted, and the dispatcher is down), makes it
// fail: that is recorded too, and is not a failure of the run.
func (c *cluster) streamFault(ctx context.Context, what string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := c.touchStream(ctx, what)
	for err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && ctx.Err() == nil {
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
			err = c.touchStream(ctx, what)
		}
		t.Stop()
	}
	e := Event{Kind: KindStream, Component: CompNATS, Detail: what}
	if err != nil {
		e.Err = err.Error()
	}
	c.h.add(e)
	c.log.Info("stream fault", "what", what, "err", err)
}

func (c *cluster) touchStream(ctx context.Context, what string) error {
	nc, err := nats.Connect("nats://"+c.natsAddr, nats.Name("torture"), nats.Timeout(2*time.Second), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("torture: connect to the broker: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("torture: %w", err)
	}
	name := natsStream()
	if what == StreamDelete {
		return js.DeleteStream(ctx, name)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	return st.Purge(ctx)
}
