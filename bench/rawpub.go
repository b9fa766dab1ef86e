package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/store/outbox"
)

// rawPublisher is scenario 4's baseline: messages shaped like outbox
// payloads, published with PublishMsgAsync and a Nats-Msg-Id each, to an
// embedded nats-server started exactly as the dispatcher starts its own
// (natsjs.StartEmbedded: file store, fsync on every write) with the same
// stream and the same async window.
type rawPublisher struct {
	ns      *server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	payload [3]string
}

func startRawPublisher(ctx context.Context, dir, target string) (*rawPublisher, error) {
	ns, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "nats")},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	p := &rawPublisher{ns: ns, subject: outbox.SubjectFor(target)}
	if p.nc, err = nats.Connect(ns.ClientURL(), nats.Name("ticketrelay-bench-raw")); err != nil {
		p.close()
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	// The dispatcher's async window (internal/app/dispatcher.go); a longer ack
	// timeout, since unlike the relay's batches of 512 this loop keeps the
	// whole window of 4096 in flight.
	if p.js, err = jetstream.New(p.nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(time.Minute)); err != nil {
		p.close()
		return nil, err
	}
	if _, err := natsjs.EnsureStream(ctx, p.js, natsjs.StreamConfig{}); err != nil {
		p.close()
		return nil, err
	}
	if _, p.payload, err = templates(target); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *rawPublisher) close() {
	if p.nc != nil {
		p.nc.Close()
	}
	p.ns.Shutdown()
	p.ns.WaitForShutdown()
}

// publish sends n new messages and returns the time from the first publish
// to the last acknowledgement.
func (p *rawPublisher) publish(ctx context.Context, n int) (time.Duration, error) {
	ids := make([]string, n)
	bodies := make([][]byte, n)
	for i := range n {
		ids[i] = newUUID()
		bodies[i] = []byte(p.payload[0] + ids[i] + p.payload[1] + "tkt_" + ids[i][:21] + p.payload[2])
	}
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, n)
	for i := range n {
		m := &nats.Msg{Subject: p.subject, Data: bodies[i], Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, ids[i])
		f, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return 0, fmt.Errorf("bench: raw publish %d: %w", i, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				return 0, fmt.Errorf("bench: raw publish %d acknowledged as a duplicate", i)
			}
		case err := <-f.Err():
			return 0, fmt.Errorf("bench: raw publish %d: %w", i, err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return time.Since(start), nil
}
