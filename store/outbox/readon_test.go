package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/backoff"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/fixture"
)

// The relay reads on past the batches in flight, and drains them only to
// read from the start again (see Relay.Run).

// markGate holds the first transaction asked for after it is armed until
// released: a batch's mark waiting for the write lock.
type markGate struct {
	outbox.TxRunner
	armed   atomic.Bool
	held    chan struct{} // closed once a transaction is held
	release chan struct{}
}

func (g *markGate) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.release
	}
	return g.TxRunner.InTx(ctx, fn)
}

// While a batch waits for its mark (mcp-front holds the write lock), rows
// committed meanwhile are read past it and published at once: the lag of
// a steady stream is not the mark's wait.
func TestRelayPublishesPastABatchWaitingForItsMark(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	gate := &markGate{held: make(chan struct{}), release: make(chan struct{})}
	// No lease renewal and no rescan during the test: the one transaction
	// the gate holds is the second row's mark.
	cfg := outbox.RelayConfig{LeaseTTL: time.Hour, RescanEvery: time.Hour, BusyFor: time.Hour}
	n := newNodeTx(t, "relay-past", path, natsjs.NewPublisher(js), cfg, time.Now,
		func(w outbox.TxRunner) outbox.TxRunner { gate.TxRunner = w; return gate })
	db := fixture.Raw(t, path)
	n.create(t, "first")
	n.run(t)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(gate.release) }) }) // before the relay stops
	waitFor(t, 10*time.Second, "the first row to be marked", func() bool { return marked(t, db, "first") })

	gate.armed.Store(true)
	n.create(t, "second")
	select {
	case <-gate.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the second row's mark was never asked for")
	}
	n.create(t, "third")
	waitFor(t, 10*time.Second, "the third row in the stream while the second's mark waits", func() bool {
		return len(streamMessages(t, js)["third"]) == 1
	})
	if marked(t, db, "second") {
		t.Fatal("the second row was marked while its mark was held")
	}
	once.Do(func() { close(gate.release) })
	waitFor(t, 10*time.Second, "every row to be marked", func() bool { return backlog(t, db) == 0 })
	if byID := streamMessages(t, js); len(byID) != 3 || countMsgs(byID) != 3 {
		t.Errorf("stream holds %d messages under %d ids, want 3 under 3", countMsgs(byID), len(byID))
	}
	if got := value(t, n.m.DuplicateAcks); got != 0 {
		t.Errorf("%v duplicate acks: a row in flight was read and published again", got)
	}
}

// chainPublisher is the real publisher, each batch then held until the
// next one starts (or hold has passed): while rows keep coming, a batch is
// always in flight by construction, not by timing.
type chainPublisher struct {
	outbox.Publisher
	hold time.Duration
	mu   sync.Mutex
	next chan struct{} // closed when the batch after the last one starts
}

func (p *chainPublisher) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	mine := make(chan struct{})
	p.mu.Lock()
	if p.next != nil {
		close(p.next)
	}
	p.next = mine
	p.mu.Unlock()
	res := p.Publisher.Publish(ctx, msgs)
	select {
	case <-mine:
	case <-time.After(p.hold):
	}
	return res
}

// A steady stream keeps a batch in flight all the time, so the relay never
// finds the pipeline empty; it still reads from the start every
// RescanEvery, and an operator's redrive goes out during the stream.
func TestRelayRescansWhileRowsKeepFlowing(t *testing.T) {
	b := startBroker(t)
	js := b.connect(t)
	path := filepath.Join(t.TempDir(), "tickets.db")
	cfg := outbox.RelayConfig{RescanEvery: 100 * time.Millisecond, BusyFor: time.Hour}
	// A batch is released by the next one: only a stream that stalls for
	// half a second empties the pipeline (and rescans regardless).
	n := newNodeWith(t, "relay-rescan", path, &chainPublisher{Publisher: natsjs.NewPublisher(js), hold: 500 * time.Millisecond}, cfg, time.Now)
	db := fixture.Raw(t, path)
	n.create(t, "first")
	n.run(t)
	waitFor(t, 10*time.Second, "the first row to be marked", func() bool { return marked(t, db, "first") })

	stop := make(chan struct{})
	flowing := make(chan error, 1)
	go func() { // a row every 5 ms, at most 2,000
		defer close(flowing)
		for i := range 2000 {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := n.l.Create(testCtx(t), newRequest(fmt.Sprintf("flow-%04d", i), "local")); err != nil {
				flowing <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-flowing; err != nil {
			t.Errorf("creating the stream's rows: %v", err)
		}
	}()
	waitFor(t, 10*time.Second, "the stream to be flowing", func() bool { return value(t, n.m.CommitToAck) >= 20 })
	var id int64
	if err := db.QueryRowContext(testCtx(t), `SELECT id FROM outbox WHERE request_id = 'first'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := n.w.InTx(testCtx(t), func(ctx context.Context, tx *sql.Tx) error { return outbox.RedriveTx(ctx, tx, id) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the redriven row to be published again while rows keep flowing", func() bool {
		return marked(t, db, "first")
	})
	select {
	case err := <-flowing:
		t.Fatalf("the stream of rows ended before the redrive went out (%v): the test did not run under a steady stream", err)
	default:
	}
}

// failingPublisher refuses every message at once, as a stream that refuses
// writes does, and notes when each batch came.
type failingPublisher struct {
	mu    sync.Mutex
	calls []time.Time
}

func (p *failingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	p.mu.Lock()
	p.calls = append(p.calls, time.Now())
	p.mu.Unlock()
	out := make([]outbox.PublishResult, len(msgs))
	for i := range out {
		out[i].Err = errors.New("stream refuses writes")
	}
	return out
}

func (p *failingPublisher) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.calls...)
}

// A relay whose publishes keep failing waits longer after each failure:
// the retry's outcome is known before the next round, so the backoff grows
// instead of starting again from its first step.
func TestRelayBacksOffWhilePublishesFail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.db")
	pub := &failingPublisher{}
	policy := backoff.Policy{Base: 20 * time.Millisecond, Max: 2 * time.Second}
	n := newNodeWith(t, "relay-backoff", path, pub, outbox.RelayConfig{ErrorBackoff: policy}, time.Now)
	n.create(t, "refused")
	n.run(t)
	const failures = 5
	waitFor(t, 20*time.Second, "six publish attempts", func() bool { return len(pub.times()) > failures })
	calls := pub.times()
	// After the fifth failure the relay waits at least half the backoff's
	// fifth ceiling (20 ms doubled four times): a lower bound, which a busy
	// machine only makes longer.
	want := policy.Ceiling(failures) / 2
	if gap := calls[failures].Sub(calls[failures-1]); gap < want {
		t.Errorf("attempt %d came %v after attempt %d, want at least %v (attempts at %v)",
			failures+1, gap, failures, want, calls)
	}
}
