package natscluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/natscluster"
	"ticketrelay/testkit/testwait"
)

// Generous bounds: elections take seconds, and these tests share two busy
// cores with others.
const (
	electionTimeout = 60 * time.Second
	attemptTimeout  = time.Second
	// retryPace spaces attempts that fail at once (no responders).
	retryPace = 50 * time.Millisecond
)

// connect opens a JetStream client on urls that reconnects for the whole
// test and notices a dead server within a second or two.
func connect(t *testing.T, urls string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	opts = append([]nats.Option{
		nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.PingInterval(500 * time.Millisecond), nats.MaxPingsOutstanding(2),
		nats.Timeout(attemptTimeout),
	}, opts...)
	return e2eproc.JetStream(t, urls, opts...)
}

// setup creates an R3 stream ORDERS (orders.>) and an R3 bucket claims.
func setup(t *testing.T, js jetstream.JetStream) (jetstream.Stream, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), electionTimeout)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3, Storage: jetstream.FileStorage,
		Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "claims", Replicas: 3, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s, kv
}

// publishN publishes n messages orders.<from..from+n-1>, each acknowledged,
// and returns their acks by sequence.
func publishN(t *testing.T, js jetstream.JetStream, from, n int) map[uint64]string {
	t.Helper()
	acked := map[uint64]string{}
	for k := from; k < from+n; k++ {
		data := fmt.Sprintf("order-%d", k)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ack, err := js.Publish(ctx, "orders.new", []byte(data), jetstream.WithMsgID(data))
		cancel()
		if err != nil {
			t.Fatalf("publish %s: %v", data, err)
		}
		acked[ack.Sequence] = data
	}
	return acked
}

// retryUntil calls op with a short timeout per attempt until it succeeds
// or limit passes; it returns how long that took and the attempts. A
// gap it measures is exact to within attemptTimeout.
func retryUntil(t *testing.T, limit time.Duration, what string, op func(ctx context.Context) error) (time.Duration, int) {
	t.Helper()
	began := time.Now()
	var last error
	for n := 1; time.Since(began) < limit; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		err := op(ctx)
		if err == nil {
			cancel()
			return time.Since(began), n
		}
		last = err
		cancel()
		time.Sleep(retryPace) // spaces retries of a fast failure; not a wait for a condition

	}
	t.Fatalf("%s did not succeed within %s: last error: %v", what, limit, last)
	return 0, 0
}

// checkAcked fails t unless the stream holds every acknowledged message.
func checkAcked(t *testing.T, s jetstream.Stream, acked map[uint64]string) {
	t.Helper()
	for seq, want := range acked {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := s.GetMsg(ctx, seq)
		cancel()
		if err != nil {
			t.Fatalf("acknowledged message %d (%s): %v", seq, want, err)
		}
		if string(m.Data) != want {
			t.Fatalf("message %d = %q, acknowledged as %q", seq, m.Data, want)
		}
	}
}

// waitCaughtUp waits until node i holds want messages of stream.
func waitCaughtUp(t *testing.T, c *natscluster.Cluster, i int, stream string, want uint64) {
	t.Helper()
	var last natscluster.StreamStatus
	var err error
	if !testwait.Until(electionTimeout, func() bool {
		last, err = c.Stream(context.Background(), i, stream)
		return err == nil && last.Msgs == want
	}) {
		t.Fatalf("%s did not catch up on %s: holds %+v (err %v), want %d messages", c.Name(i), stream, last, err, want)
	}
}

// other is a node index that is none of not.
func other(c *natscluster.Cluster, not ...int) int {
	for i := range c.Size() {
		skip := false
		for _, n := range not {
			skip = skip || n == i
		}
		if !skip {
			return i
		}
	}
	panic("no node left")
}

func isTimeoutOrNoResponders(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}
