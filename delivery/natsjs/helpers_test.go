package natsjs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/store/outbox"
)

// Helpers shared by the package's tests: an embedded server and a client
// per test, messages with ids, the stream's message count.

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start runs an embedded server on storeDir and stops it at cleanup.
func start(t testing.TB, storeDir string) *server.Server {
	t.Helper()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: storeDir}, discard())
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// connect is a client of s; opts come after an async window of 4,096.
func connect(t testing.TB, s *server.Server, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, append([]jetstream.JetStreamOpt{jetstream.WithPublishAsyncMaxPending(4096)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// numbered is n messages to tickets.local with request ids prefix-0 …
// prefix-(n-1), each carrying payload.
func numbered(prefix string, n int, payload []byte) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{RequestID: fmt.Sprintf("%s-%d", prefix, i), Subject: "tickets.local", Payload: payload}
	}
	return msgs
}

func msgWithID(subject, id, data string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = []byte(data)
	return m
}

func streamMsgs(t *testing.T, ctx context.Context, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
