package torture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream faults the scheduler makes (Event.Detail of KindStream).
const (
	StreamDelete = "delete"
	StreamPurge  = "purge"
)

// streamFault deletes or purges the installation's stream on the broker at
// urls through the JetStream API, as an operator's nats CLI would, and
// records it in h. A broker still starting is given a few seconds; one
// that does not answer, or a stream that is not there (deleted, and no
// dispatcher runs to put it back), makes it fail: that is recorded too,
// and is not a failure of the run.
func streamFault(ctx context.Context, urls string, h *history, log *slog.Logger, what string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := touchStream(ctx, urls, what)
	for err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && ctx.Err() == nil {
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
			err = touchStream(ctx, urls, what)
		}
		t.Stop()
	}
	e := Event{Kind: KindStream, Component: CompNATS, Detail: what}
	if err != nil {
		e.Err = err.Error()
	}
	h.add(e)
	log.Info("stream fault", "what", what, "err", err)
}

func touchStream(ctx context.Context, urls, what string) error {
	nc, err := nats.Connect(urls, nats.Name("torture"), nats.Timeout(2*time.Second), nats.NoReconnect())
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
