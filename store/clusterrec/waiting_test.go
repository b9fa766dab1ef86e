package clusterrec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/internal/archetype"
	"ticketrelay/internal/backoff"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/fixture"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// commentAPI is a keyed API that takes comments; a create of a title in
// down fails as an outage would while down is set.
type commentAPI struct {
	down     atomic.Bool
	failing  string // the title that fails while down
	mu       sync.Mutex
	creates  map[string]int    // key → creates stored under it
	comments map[string]int    // key → comments stored under it
	on       map[string]string // comment key → the ticket it was written on
}

func newCommentAPI(failing string) *commentAPI {
	a := &commentAPI{failing: failing, creates: map[string]int{}, comments: map[string]int{}, on: map[string]string{}}
	a.down.Store(true)
	return a
}

func (a *commentAPI) Name() string { return "api" }
func (a *commentAPI) Capabilities() downstream.Capabilities {
	return downstream.Capabilities{DedupeKey: true, Lookup: downstream.LookupNone}
}
func (a *commentAPI) CommentCapabilities() downstream.Capabilities {
	return downstream.Capabilities{DedupeKey: true}
}
func (a *commentAPI) ParseTicket(ref string) (downstream.Receipt, error) {
	return downstream.Receipt{ExternalID: ref}, nil
}

func (a *commentAPI) Deliver(_ context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	if d.Ticket.Title == a.failing && a.down.Load() {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Transient, StatusCode: 503, Err: fmt.Errorf("down for maintenance")}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.creates[d.Key]++
	return downstream.Receipt{ExternalID: "item-" + d.Key}, nil
}

func (a *commentAPI) AddComment(_ context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.comments[d.Key]++
	a.on[d.Key] = d.Ticket
	return downstream.CommentReceipt{ExternalID: "note-" + d.Key}, nil
}

// dispatch runs h's side of a dispatcher: the relay of its ledger's
// outbox and a forwarder on the cluster record, until the returned stop.
func dispatch(t *testing.T, js jetstream.JetStream, h *host, cfg forwarder.Config, api downstream.Target) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := metrics.NewDispatcher(prometheus.NewRegistry())
	arch := archetype.Archetype{Logger: discard(), Metrics: m}
	relay, err := outbox.NewRelay(arch, outbox.RelayConfig{Holder: h.id, PollInterval: 5 * time.Millisecond},
		h.fx.DB.Reader(), h.fx.Writer, natsjs.NewPublisher(js, natsjs.ForInstallation("test")))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Installation, cfg.Host = "test", h.id
	f := forwarder.New(arch, cfg, js, h.deliv, []downstream.Target{api})
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{relay.Run, f.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", h.id, err)
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// More comments wait for their ticket's create than the target's
// MaxAckPending, on a multi-host installation: they are parked in the
// cluster record and their messages acked, so an unrelated create to the
// same target, behind them in the stream, is delivered; once the create is
// delivered through the other host, each comment lands exactly once, on
// its ticket, and nothing stays parked. With 0180's hand-back the waiting
// comments filled MaxAckPending and the unrelated create was never sent.
func TestWaitingCommentsParkInTheClusterRecord(t *testing.T) {
	const maxAckPending, comments = 4, 12
	ctx := ctxT(t)
	n := fixture.StartNATSWithStream(t, natsjs.StreamConfig{Installation: "test"})
	js := connectJS(t, n.URL)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	api := newCommentAPI("checkout returns 500")

	create := func(id, title string) {
		t.Helper()
		r := newRequest(id, title)
		r.Target = "api"
		if err := r.Normalize(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.front.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	create("stuck", "checkout returns 500")
	var ids []string
	for i := range comments {
		id := fmt.Sprintf("note-%d", i)
		c := ticket.Request{RequestID: id, Tool: "add_comment", Target: "api", Body: "seen again", Action: ticket.Action{On: "stuck"}}
		if err := c.NormalizeComment(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.front.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cfg := forwarder.Config{Workers: 2, DeliveryTimeout: 10 * time.Second, MaxAckPending: maxAckPending, MaxAttempts: 1000,
		Retry: backoff.Policy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}}
	stopA := dispatch(t, js, a, cfg, api)
	dispatch(t, js, b, cfg, api)

	status := func(id string) request.Status {
		st, err := b.front.Find(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		return st.Status
	}
	// The unrelated create comes after the comments in the stream.
	create("fresh", "disk full")
	testwait.For(t, 30*time.Second, "the unrelated create delivered", func() bool { return status("fresh") == request.StatusDelivered })
	if st := status("stuck"); st != request.StatusRetrying {
		t.Fatalf("the stuck create is %s, want still retrying", st)
	}
	rec, _, _, err := a.store.Get(ctx, "stuck")
	if err != nil || !rec.Waiters {
		t.Fatalf("the stuck create's record %+v, %v: want it to say it has waiters", rec, err)
	}

	// Host a's dispatcher stops: the create is delivered through b, whose
	// write of the settled record publishes a's parked comments again.
	stopA()
	api.down.Store(false)
	testwait.For(t, 30*time.Second, "the create delivered", func() bool { return status("stuck") == request.StatusDelivered })
	for _, id := range ids {
		testwait.For(t, 30*time.Second, id+" delivered", func() bool { return status(id) == request.StatusDelivered })
	}
	rec, _, _, err = b.store.Get(ctx, "stuck")
	if err != nil || rec.Delivery == nil || rec.Delivery.ExternalID == "" {
		t.Fatalf("the stuck create's record %+v, %v", rec, err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.comments) != comments {
		t.Errorf("%d comments stored, want %d", len(api.comments), comments)
	}
	for key, k := range api.comments {
		if k != 1 || api.on[key] != rec.Delivery.ExternalID {
			t.Errorf("comment %s: stored %d times on %q; want once on %q", key, k, api.on[key], rec.Delivery.ExternalID)
		}
	}
	kv, err := js.KeyValue(ctx, installation.Name("test").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.ListKeysFiltered(ctx, "w.>"); err == nil {
		left := 0
		for range keys.Keys() {
			left++
		}
		if left != 0 {
			t.Errorf("%d requests still parked", left)
		}
	}
}

// A settling write that could not publish the parked requests again (here
// the ticket stream is missing, as for a host lost right after the write)
// leaves their entries; the next heartbeat round's sweep publishes them,
// under the entry's message id, and deletes them.
func TestSweepPublishesWhatASettlerLeft(t *testing.T) {
	ctx := ctxT(t)
	n := fixture.StartNATS(t)
	js := connectJS(t, n.URL)
	a := newHost(t, js, "host-a", clusterrec.Config{})
	if _, err := a.front.Create(ctx, newRequest("stuck", "checkout returns 500")); err != nil {
		t.Fatal(err)
	}
	c := ticket.Request{RequestID: "note", Tool: "add_comment", Target: "local", Body: "seen again", Action: ticket.Action{On: "stuck"}}
	if err := c.NormalizeComment(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.front.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if parked, err := a.deliv.Park(ctx, "note"); err != nil || !parked {
		t.Fatalf("park: %v, %v; want parked", parked, err)
	}
	if again, err := a.deliv.Park(ctx, "note"); err != nil || !again {
		t.Fatalf("park again: %v, %v; want parked", again, err)
	}
	if err := a.deliv.RecordDelivery(ctx, request.Delivery{RequestID: "stuck", Target: "local", State: string(request.StatusDelivered),
		Attempts: 1, ExternalID: "line-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{Installation: "test"}.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	none := func(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
	h := clusterrec.NewHosts(archetype.Archetype{Logger: discard()}, clusterrec.HostsConfig{Every: time.Second}, a.store, a.l, none)
	if err := h.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := js.Stream(ctx, installation.Name("test").Stream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := m.GetLastMsgForSubject(ctx, installation.Name("test").Subject("local"))
	if err != nil {
		t.Fatalf("nothing published again: %v", err)
	}
	var ref ticket.Ref
	if err := json.Unmarshal(msg.Data, &ref); err != nil || ref.RequestID != "note" || ref.Kind != ticket.KindComment ||
		!strings.HasPrefix(msg.Header.Get(jetstream.MsgIDHeader), "note#parked-") {
		t.Fatalf("published %s with id %q (%v); want note's message under a parked id", msg.Data, msg.Header.Get(jetstream.MsgIDHeader), err)
	}
	if published, err := a.store.SweepParked(ctx); err != nil || published != 0 {
		t.Fatalf("a second sweep published %d (%v), want 0", published, err)
	}
	if parked, err := a.deliv.Park(ctx, "note"); err != nil || parked {
		t.Fatalf("park on a settled create: %v, %v; want not parked (act now)", parked, err)
	}
}
