package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/natsjs"
	"ticketrelay/outbox"
)

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

func connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
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

func TestStreamConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  natsjs.StreamConfig
		ok   bool
	}{
		{"defaults", natsjs.StreamConfig{}.WithDefaults(), true},
		{"window of exactly 30m", natsjs.StreamConfig{Duplicates: 30 * time.Minute, MaxAge: 30 * time.Minute}, true},
		{"window of 2h, age 1d", natsjs.StreamConfig{Duplicates: 2 * time.Hour, MaxAge: 24 * time.Hour}, true},
		{"window just under 30m", natsjs.StreamConfig{Duplicates: 30*time.Minute - time.Second, MaxAge: time.Hour}, false},
		{"window of 2m (the JetStream default)", natsjs.StreamConfig{Duplicates: 2 * time.Minute, MaxAge: time.Hour}, false},
		{"no window", natsjs.StreamConfig{MaxAge: time.Hour}, false},
		{"max age shorter than the window", natsjs.StreamConfig{Duplicates: time.Hour, MaxAge: 59 * time.Minute}, false},
		{"default window, max age 10m", natsjs.StreamConfig{MaxAge: 10 * time.Minute}.WithDefaults(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate(%+v) = %v", tc.cfg, err)
			}
			if !tc.ok && !errors.Is(err, natsjs.ErrInvalidStream) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidStream", tc.cfg, err)
			}
		})
	}
	d := natsjs.StreamConfig{}.WithDefaults()
	if d.Name != "TICKETS" || d.Duplicates != 30*time.Minute || d.MaxAge != 7*24*time.Hour || d.Replicas != 1 {
		t.Errorf("defaults = %+v", d)
	}
}

func TestEnsureStream(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))

	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{Name: "BAD", Duplicates: time.Minute}); !errors.Is(err, natsjs.ErrInvalidStream) {
		t.Fatalf("EnsureStream with a 1m window = %v, want ErrInvalidStream", err)
	}
	if _, err := js.Stream(ctx, "BAD"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("an invalid configuration created a stream: %v", err)
	}

	cfg := natsjs.StreamConfig{Name: "T2", Duplicates: 45 * time.Minute, MaxAge: 2 * time.Hour}
	st, err := natsjs.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	check := func(dup time.Duration) {
		t.Helper()
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := info.Config
		if c.Name != "T2" || c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage ||
			c.Duplicates != dup || c.MaxAge != 2*time.Hour || c.Replicas != 1 ||
			!slices.Equal(c.Subjects, []string{"tickets.>"}) || c.Discard != jetstream.DiscardOld ||
			c.MaxMsgsPerSubject != natsjs.MaxMsgsPerSubject || c.MaxMsgs != -1 || c.MaxBytes != -1 {
			t.Fatalf("stream config = %+v", c)
		}
	}
	check(45 * time.Minute)
	if _, err := js.Publish(ctx, "tickets.local", []byte("kept")); err != nil {
		t.Fatal(err)
	}

	st, err = natsjs.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatalf("second EnsureStream: %v", err)
	}
	check(45 * time.Minute)
	if n := streamMsgs(t, ctx, st); n != 1 {
		t.Fatalf("stream holds %d messages after a second EnsureStream, want 1", n)
	}

	cfg.Duplicates = time.Hour
	if st, err = natsjs.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatalf("EnsureStream with a longer window: %v", err)
	}
	check(time.Hour)
}

// The stream's message blocks are 4 MB, not the 8 MB nats-server gives a
// stream without limits (EnsureStream sets a per-subject limit for it): 9 MB
// of messages fill more than two block files, none of them over 4 MB.
func TestStreamBlockSize(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	_, js := connect(t, start(t, dir))
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub := natsjs.NewPublisher(js, natsjs.AtomicBatches(func(err error) { t.Errorf("fallback: %v", err) }))
	payload := bytes.Repeat([]byte("x"), 1000)
	for b := range 9 {
		for _, r := range pub.Publish(ctx, numbered(fmt.Sprint("b", b), 1000, payload)) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	blocks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "TICKETS", "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, b := range blocks {
		fi, err := os.Stat(b)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	if len(blocks) < 3 || slices.Max(sizes) > 4<<20 {
		t.Fatalf("block files %v, sizes %v: want 3 or more, none over 4 MB", blocks, sizes)
	}
}

func TestEmbeddedServerSyncsAndKeepsDedupeAcrossRestart(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: dir}, discard())
	if err != nil {
		t.Fatal(err)
	}
	jc := s.JetStreamConfig()
	if jc == nil || !jc.SyncAlways {
		t.Fatalf("JetStream config %+v: want SyncAlways", jc)
	}
	if jc.StoreDir == "" || !s.JetStreamEnabled() {
		t.Fatalf("JetStream not on a file store: %+v", jc)
	}
	if s.Addr() == nil || s.Addr().String() == "127.0.0.1:0" {
		t.Fatalf("listening on %v", s.Addr())
	}
	nc, js := connect(t, s)
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if a, err := js.PublishMsg(ctx, msgWithID("tickets.local", "req-X", "x")); err != nil || a.Duplicate {
		t.Fatalf("publish X = %+v, %v", a, err)
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()

	s2 := start(t, dir)
	_, js2 := connect(t, s2)
	st, err := natsjs.EnsureStream(ctx, js2, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := js2.PublishMsg(ctx, msgWithID("tickets.local", "req-X", "x again"))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Duplicate {
		t.Fatalf("after a restart, republishing X was stored again (%+v): the dedupe map was lost", a)
	}
	if a, err := js2.PublishMsg(ctx, msgWithID("tickets.local", "req-Y", "y")); err != nil || a.Duplicate {
		t.Fatalf("publish Y = %+v, %v", a, err)
	}
	if n := streamMsgs(t, ctx, st); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

func TestStartEmbeddedRejectsBadListen(t *testing.T) {
	for _, listen := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1"} {
		s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: listen, StoreDir: t.TempDir()}, discard())
		if err == nil {
			s.Shutdown()
			t.Errorf("StartEmbedded(%q) started a server", listen)
		}
	}
}

// A port in use is an error at once, naming the listen error, not a 30 s
// wait for a server that never gets ready.
func TestStartEmbeddedPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	began := time.Now()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: ln.Addr().String(), StoreDir: t.TempDir()}, discard())
	if err == nil {
		s.Shutdown()
		t.Fatalf("StartEmbedded on %s, a port in use, started a server", ln.Addr())
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("StartEmbedded took %s to fail", took)
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("error %q does not name the address and the listen error", err)
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
