package audit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/audit"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/testwait"
)

// blocker records what the watcher notes for find_request.
type blocker struct {
	mu      sync.Mutex
	blocked bool
	since   time.Time
	reason  string
}

func (b *blocker) Blocked(_ context.Context, since time.Time, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked, b.since, b.reason = true, since, reason
	return nil
}

func (b *blocker) Unblocked(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked = false
	return nil
}

func (w *world) watcher(t *testing.T, broker audit.Broker, b audit.Blocker) *audit.Watcher {
	t.Helper()
	return w.watcherWith(t, audit.WatchConfig{}, broker, b)
}

func (w *world) watcherWith(t *testing.T, cfg audit.WatchConfig, broker audit.Broker, b audit.Blocker) *audit.Watcher {
	t.Helper()
	wt, err := audit.NewWatcher(archetype.Archetype{Logger: w.log, Metrics: w.m}, cfg, w.l, broker, b, w.relay, audit.NewPokes())
	if err != nil {
		t.Fatal(err)
	}
	return wt
}

func (w *world) streamWatch(t *testing.T) *natsjs.StreamWatch {
	t.Helper()
	st, err := w.js.Stream(context.Background(), w.cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	return natsjs.NewStreamWatch(w.js, w.cfg, st)
}

func (w *world) generationsAtLeast(t *testing.T, g int, ids []string) {
	t.Helper()
	testwait.For(t, 10*time.Second, "every row published again", func() bool {
		for _, id := range ids {
			if r := w.row(t, id); r.generation < g || !r.published || r.seq == 0 {
				return false
			}
		}
		return true
	})
}

// A purge and a deletion of the stream, each followed by one round: the
// stream is put back and the published, undelivered requests it lost are
// queued again, once; a round with nothing wrong changes nothing.
func TestWatcherRepublishesWhatThePurgedOrDeletedStreamLost(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	ids := []string{"w-1", "w-2", "w-3"}
	w.create(t, ids...)
	w.allPublished(t, ids)
	testwait.For(t, 10*time.Second, "the relay to lead", w.relay.Leading)
	wt := w.watcher(t, w.streamWatch(t), &blocker{})
	wt.Round(ctx)
	wt.Round(ctx)
	for _, id := range ids {
		if g := w.row(t, id).generation; g != 0 {
			t.Fatalf("%s at generation %d with nothing lost", id, g)
		}
	}

	if err := w.stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	wt.Round(ctx)
	w.generationsAtLeast(t, 1, ids)
	if got := testutil.ToFloat64(w.m.StreamLost); got != 3 {
		t.Fatalf("lost messages counted %v, want 3", got)
	}
	if got := testutil.ToFloat64(w.m.StreamRepairs.WithLabelValues("stream_lost")); got != 1 {
		t.Fatalf("stream_lost repairs %v, want 1", got)
	}
	wt.Round(ctx)

	if err := w.js.DeleteStream(ctx, w.cfg.Name); err != nil {
		t.Fatal(err)
	}
	// The broker may refuse the first re-create while it still removes the
	// deleted stream's directory; the next round puts the stream back.
	testwait.For(t, 10*time.Second, "a round to put the stream back", func() bool {
		wt.Round(ctx)
		return testutil.ToFloat64(w.m.StreamRepairs.WithLabelValues(natsjs.RepairStreamMissing)) > 0
	})
	if got := testutil.ToFloat64(w.m.StreamRepairs.WithLabelValues(natsjs.RepairStreamMissing)); got != 1 {
		t.Fatalf("stream_missing repairs %v, want 1", got)
	}
	w.generationsAtLeast(t, 2, ids)
	if got := testutil.ToFloat64(w.m.StreamLost); got != 6 {
		t.Fatalf("lost messages counted %v, want 6", got)
	}
	for range 3 {
		wt.Round(ctx)
	}
	for _, id := range ids {
		if g := w.row(t, id).generation; g != 2 {
			t.Fatalf("%s at generation %d after rounds with nothing lost, want 2", id, g)
		}
	}
}

// flaky is a broker that cannot be reached while down is set.
type flaky struct {
	audit.Broker
	down atomic.Bool
}

func (f *flaky) Check(ctx context.Context) (natsjs.StreamState, string, error) {
	if f.down.Load() {
		return natsjs.StreamState{}, "", errors.New("not connected to the NATS server")
	}
	return f.Broker.Check(ctx)
}

// While the stream cannot be reached the watcher notes since when and why,
// and clears the note once it is back.
func TestWatcherNotesBlockedDelivery(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	f := &flaky{Broker: w.streamWatch(t)}
	b := &blocker{}
	wt := w.watcher(t, f, b)
	wt.Round(ctx)
	if b.blocked {
		t.Fatal("blocked while the stream is reachable")
	}
	f.down.Store(true)
	before := time.Now()
	wt.Round(ctx)
	wt.Round(ctx)
	if !b.blocked || b.since.Before(before) || b.reason != "not connected to the NATS server" {
		t.Fatalf("blocked note %+v after failed rounds", b)
	}
	f.down.Store(false)
	wt.Round(ctx)
	if b.blocked {
		t.Fatal("the note stayed once the stream was back")
	}
}

// Messages stored and purged between two looks, or before the first one,
// are found too: the first by the newest rows compared with the stream when
// the watcher starts leading, the second by a first sequence that moved past
// messages stored since the last look.
func TestWatcherFindsLossesItDidNotSee(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	testwait.For(t, 10*time.Second, "the relay to lead", w.relay.Leading)

	first := []string{"unseen-1", "unseen-2"}
	w.create(t, first...)
	w.allPublished(t, first)
	if err := w.stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	wt := w.watcher(t, w.streamWatch(t), &blocker{})
	wt.Round(ctx) // its first look
	w.generationsAtLeast(t, 1, first)

	wt.Round(ctx)
	second := []string{"between-1", "between-2"}
	w.create(t, second...)
	w.allPublished(t, second)
	if err := w.stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	wt.Round(ctx)
	w.generationsAtLeast(t, 1, second)
	w.generationsAtLeast(t, 2, first) // the second purge took their new copies too
	if got := testutil.ToFloat64(w.m.StreamLost); got != 6 {
		t.Fatalf("lost messages counted %v, want 6", got)
	}
}

// held is a publisher that, while hold is set, keeps each batch after the
// broker acknowledged it and before the relay marks it: acked hears of it,
// release lets it go.
type held struct {
	outbox.Publisher
	hold    atomic.Bool
	acked   chan struct{}
	release chan struct{}
}

func (h *held) Publish(ctx context.Context, msgs []outbox.Message) []outbox.PublishResult {
	res := h.Publisher.Publish(ctx, msgs)
	if h.hold.Load() {
		h.acked <- struct{}{}
		<-h.release
	}
	return res
}

// A message the old stream acknowledged whose row is marked published only
// after the watcher put the stream back and scanned for losses (the relay's
// mark was late) is published again too, once the mark is in: not left
// published under a sequence of the deleted stream until the audit finds it.
func TestWatcherScansAgainWhenBatchesInFlightAreMarked(t *testing.T) {
	h := &held{acked: make(chan struct{}), release: make(chan struct{})}
	w := newWorldWith(t, func(p outbox.Publisher) outbox.Publisher { h.Publisher = p; return h })
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(h.release) }) }) // before the relay stops
	ctx, cancel := context.WithCancel(context.Background())
	testwait.For(t, 10*time.Second, "the relay to lead", w.relay.Leading)
	// Rounds run when the test calls them, or, once Run runs, when the
	// batches in flight are marked: never on the clock.
	wt := w.watcherWith(t, audit.WatchConfig{Interval: time.Hour}, w.streamWatch(t), &blocker{})
	wt.Round(ctx)

	h.hold.Store(true)
	w.create(t, "late-mark")
	select {
	case <-h.acked:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not publish late-mark")
	}
	h.hold.Store(false)
	if err := w.js.DeleteStream(ctx, w.cfg.Name); err != nil {
		t.Fatal(err)
	}
	// A round puts the stream back and scans: late-mark is not marked
	// published yet (its batch is held). The broker may refuse the first
	// re-create while it still removes the deleted stream's directory; the
	// next round puts it back, as Run's would a second later.
	repairs := func() float64 {
		return testutil.ToFloat64(w.m.StreamRepairs.WithLabelValues(natsjs.RepairStreamMissing))
	}
	testwait.For(t, 10*time.Second, "a round to put the stream back", func() bool {
		wt.Round(ctx)
		return repairs() > 0
	})
	if got := repairs(); got != 1 {
		t.Fatalf("stream_missing repairs %v, want 1", got)
	}
	if r := w.row(t, "late-mark"); r.published {
		t.Fatal("late-mark marked published while its batch was held")
	}
	done := make(chan error, 1)
	go func() { done <- wt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	release.Do(func() { close(h.release) })

	testwait.For(t, 10*time.Second, "late-mark published to the stream put back", func() bool {
		r := w.row(t, "late-mark")
		if !r.published || r.seq == 0 {
			return false
		}
		ok, err := w.check.Holds(ctx, r.seq, outbox.Message{RequestID: "late-mark", Generation: r.generation}.MsgID())
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	if got := testutil.ToFloat64(w.m.StreamLost); got != 1 {
		t.Errorf("lost messages counted %v, want 1", got)
	}
}
