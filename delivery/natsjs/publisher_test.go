package natsjs_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/store/outbox"
)

// The outbox publisher: dedupe by Nats-Msg-Id, atomic batches and their
// fallback, the sequence of every stored message.

func TestSameMsgIDPublishedTwiceIsStoredOnce(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	st, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}

	// Plain JetStream publishes with the header.
	a1, err := js.PublishMsg(ctx, msgWithID("tickets.local", "req-X", "first"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := js.PublishMsg(ctx, msgWithID("tickets.local", "req-X", "second"))
	if err != nil {
		t.Fatalf("second publish with the same Nats-Msg-Id failed: %v", err)
	}
	if a1.Duplicate || !a2.Duplicate {
		t.Fatalf("acks Duplicate = %v then %v, want false then true", a1.Duplicate, a2.Duplicate)
	}
	if a1.Stream != "TICKETS" || a2.Sequence != a1.Sequence {
		t.Fatalf("acks %+v and %+v: the duplicate must point at the stored message", a1, a2)
	}
	if n := streamMsgs(t, ctx, st); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
	stored, err := st.GetMsg(ctx, a1.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if string(stored.Data) != "first" || stored.Header.Get(jetstream.MsgIDHeader) != "req-X" {
		t.Fatalf("stored message %q with id %q, want the first one", stored.Data, stored.Header.Get(jetstream.MsgIDHeader))
	}

	// The same through the outbox publisher, including a repeat inside one batch.
	pub := natsjs.NewPublisher(js)
	msgs := []outbox.Message{
		{RequestID: "req-Y", Subject: "tickets.local", Payload: []byte("y")},
		{RequestID: "req-Y", Subject: "tickets.local", Payload: []byte("y again")},
		{RequestID: "req-X", Subject: "tickets.local", Payload: []byte("x again")},
		{RequestID: "req-X", Subject: "tickets.local", Payload: []byte("x redriven"), Generation: 1},
	}
	res := pub.Publish(ctx, msgs)
	if len(res) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res), len(msgs))
	}
	want := []bool{false, true, true, false}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("result %d: %v", i, r.Err)
		}
		if r.Duplicate != want[i] {
			t.Errorf("result %d (%s) Duplicate = %v, want %v", i, msgs[i].MsgID(), r.Duplicate, want[i])
		}
	}
	if n := streamMsgs(t, ctx, st); n != 3 {
		t.Fatalf("stream holds %d messages, want 3 (X, Y, X's redrive)", n)
	}
	var ids []string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	if !slices.Equal(ids, []string{"req-X", "req-Y", "req-X#redrive-1"}) {
		t.Errorf("stored Nats-Msg-Ids %q", ids)
	}
}

// An atomic batch is stored whole, in order, with its batch headers (the
// proof that it went as one batch); a batch the stream refuses, because it
// repeats an id inside itself or holds one the stream already has, goes
// again message by message, and every result says which were duplicates.
func TestAtomicBatches(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	st, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !natsjs.AllowsAtomicBatches(st) {
		t.Fatal("the embedded server did not take AllowAtomicPublish")
	}
	var fallbacks []error
	pub := natsjs.NewPublisher(js, natsjs.AtomicBatches(func(err error) { fallbacks = append(fallbacks, err) }), natsjs.MinAtomicBatch(2))
	batch := func(ids ...string) []outbox.Message {
		var ms []outbox.Message
		for _, id := range ids {
			ms = append(ms, outbox.Message{RequestID: id, Subject: "tickets.local", Payload: []byte("ticket " + id)})
		}
		return ms
	}
	check := func(name string, msgs []outbox.Message, wantDup []bool) {
		t.Helper()
		res := pub.Publish(ctx, msgs)
		if len(res) != len(msgs) {
			t.Fatalf("%s: %d results for %d messages", name, len(res), len(msgs))
		}
		for i, r := range res {
			if r.Err != nil || r.Duplicate != wantDup[i] {
				t.Errorf("%s: result %d (%s) = %+v, want duplicate %v", name, i, msgs[i].RequestID, r, wantDup[i])
			}
		}
	}
	check("new batch", batch("a", "b", "c"), []bool{false, false, false})
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != []string{"a", "b", "c"}[seq-1] || m.Header.Get("Nats-Batch-Id") == "" {
			t.Errorf("message %d: id %q, batch %q: want a, b, c stored as one atomic batch", seq, id, m.Header.Get("Nats-Batch-Id"))
		}
	}
	check("repeat inside the batch", batch("d", "d"), []bool{false, true})
	check("id already stored", batch("c", "e"), []bool{true, false})
	if n := streamMsgs(t, ctx, st); n != 5 {
		t.Fatalf("stream holds %d messages, want 5 (a-e)", n)
	}
	if len(fallbacks) != 2 {
		t.Errorf("fallbacks %v, want the two refused batches", fallbacks)
	}
	for _, err := range fallbacks {
		if !strings.Contains(err.Error(), "duplicate") {
			t.Errorf("fallback because %v, want the duplicate id", err)
		}
	}
	for seq := uint64(4); seq <= 5; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if b := m.Header.Get("Nats-Batch-Id"); b != "" {
			t.Errorf("message %d carries batch %q: a refused batch's messages should go on their own", seq, b)
		}
	}
}

// Every publish result says where the stream stored its message, also with
// atomic batches and single publishes racing on one connection, and for a
// duplicate (the earlier copy's sequence); the StreamChecker finds each
// message there, and not once it is gone or the id differs.
func TestPublishSequencesAndStreamChecker(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	st, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := natsjs.NewPublisher(js, natsjs.AtomicBatches(nil), natsjs.MinAtomicBatch(2))
	const workers, rounds = 4, 10
	type sent struct {
		msg outbox.Message
		res outbox.PublishResult
	}
	results := make([][]sent, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				n := 1 + (w+r)%5 // batches of 1 (a single publish) to 5
				var msgs []outbox.Message
				for i := range n {
					id := fmt.Sprintf("w%d-r%d-%d", w, r, i)
					msgs = append(msgs, outbox.Message{RequestID: id, Subject: "tickets.local", Payload: []byte(id)})
				}
				for i, res := range pub.Publish(ctx, msgs) {
					results[w] = append(results[w], sent{msgs[i], res})
				}
			}
		})
	}
	wg.Wait()
	check := natsjs.NewStreamChecker(js, "TICKETS")
	seen := map[uint64]string{}
	for _, rs := range results {
		for _, s := range rs {
			if s.res.Err != nil || s.res.Seq == 0 {
				t.Fatalf("%s: %+v", s.msg.RequestID, s.res)
			}
			if other, dup := seen[s.res.Seq]; dup {
				t.Errorf("sequence %d given to %s and %s", s.res.Seq, other, s.msg.RequestID)
			}
			seen[s.res.Seq] = s.msg.RequestID
			if ok, err := check.Holds(ctx, s.res.Seq, s.msg.MsgID()); err != nil || !ok {
				t.Errorf("%s at %d: Holds = %v, %v", s.msg.RequestID, s.res.Seq, ok, err)
			}
		}
	}
	first := results[0][0]
	again := pub.Publish(ctx, []outbox.Message{first.msg})
	if again[0].Err != nil || !again[0].Duplicate || again[0].Seq != first.res.Seq {
		t.Errorf("republished %s: %+v, want a duplicate at %d", first.msg.RequestID, again[0], first.res.Seq)
	}
	if ok, err := check.Holds(ctx, first.res.Seq, "another-id"); err != nil || ok {
		t.Errorf("Holds with another id = %v, %v; want false", ok, err)
	}
	if err := st.DeleteMsg(ctx, first.res.Seq); err != nil {
		t.Fatal(err)
	}
	if ok, err := check.Holds(ctx, first.res.Seq, first.msg.MsgID()); err != nil || ok {
		t.Errorf("Holds after the message was deleted = %v, %v; want false", ok, err)
	}
	if ok, err := check.Holds(ctx, 1<<40, "x"); err != nil || ok {
		t.Errorf("Holds past the end = %v, %v; want false", ok, err)
	}
}

// Below DefaultMinAtomicBatch messages a batch goes message by message (an
// atomic batch's fixed cost would outweigh the fsyncs it saves); from there
// on it is one atomic batch.
func TestSmallBatchesGoOneByOne(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))
	st, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := natsjs.NewPublisher(js, natsjs.AtomicBatches(func(err error) { t.Errorf("fallback: %v", err) }))
	for _, n := range []int{natsjs.DefaultMinAtomicBatch - 1, natsjs.DefaultMinAtomicBatch} {
		var msgs []outbox.Message
		for i := range n {
			id := fmt.Sprintf("n%d-%d", n, i)
			msgs = append(msgs, outbox.Message{RequestID: id, Subject: "tickets.local", Payload: []byte(id)})
		}
		batches := map[string]int{}
		for i, res := range pub.Publish(ctx, msgs) {
			if res.Err != nil || res.Duplicate || res.Seq == 0 {
				t.Fatalf("%s: %+v", msgs[i].RequestID, res)
			}
			m, err := st.GetMsg(ctx, res.Seq)
			if err != nil {
				t.Fatal(err)
			}
			batches[m.Header.Get("Nats-Batch-Id")]++
		}
		atomic := n >= natsjs.DefaultMinAtomicBatch
		if got := batches[""] == 0 && len(batches) == 1; got != atomic {
			t.Errorf("%d messages stored with batch ids %v; want one atomic batch: %v", n, batches, atomic)
		}
	}
}
