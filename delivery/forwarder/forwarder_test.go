package forwarder_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"
	"ticketrelay/testkit/testio"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/local"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/outbox"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// A message for a request already settled (an ack lost, a republish after
// the duplicate window) is acknowledged without calling the API.
func TestRedeliveryOfSettledRequestSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	before := e.waitStatus(t, id, request.StatusDelivered)
	e.waitConsumerIdle(t, api.name)

	// The same ticket again, under another Nats-Msg-Id so JetStream keeps it.
	e.publishRaw(t, outbox.SubjectFor(api.name), id+"#again", e.payload(t, id))
	stream, err := e.js.Stream(context.Background(), "TICKETS")
	if err != nil {
		t.Fatal(err)
	}
	si, err := stream.Info(context.Background())
	if err != nil || si.State.Msgs != 2 {
		t.Fatalf("stream info %+v (err %v), want 2 messages", si, err)
	}
	waitFor(t, 15*time.Second, "the redelivery to be skipped", func() bool {
		return testutil.ToFloat64(e.m.RedeliveredSkipped.WithLabelValues(api.name)) == 1
	})
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
	after := e.find(t, id)
	if after.Status != request.StatusDelivered || after.ExternalID != before.ExternalID || after.Attempts != 1 {
		t.Errorf("status after the redelivery %+v, want unchanged %+v", after, before)
	}
}

// The message names the ticket; the target gets the ticket its ledger row
// holds. A message that carries a whole ticket, as published before messages
// became references, still decodes, and its stale copy is not what is sent.
func TestDeliversTheLedgersTicket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	id := e.create(t, api.name)
	e.waitStatus(t, id, request.StatusPublished)
	stale := ticket.Ticket{Request: ticket.Request{RequestID: id, Tool: "create_ticket", Target: api.name, Title: "stale copy", Priority: "normal"},
		ID: ticket.IDFor(id), CreatedAt: time.Now().UTC()}
	data, err := json.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, outbox.SubjectFor(api.name), id+"#v0", data)
	e.startForwarder(t, testConfig(), api)

	e.waitStatus(t, id, request.StatusDelivered)
	e.waitConsumerIdle(t, api.name) // both messages handled and acknowledged
	if n := testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)); n != 0 {
		t.Fatalf("%v messages terminated as undecodable, want 0", n)
	}
	// Two workers may take the two messages at once; the key keeps it one item.
	calls := api.Calls()
	if len(calls) == 0 || len(api.Items()) != 1 {
		t.Fatalf("%d calls, %d items; want at least 1 call, 1 item", len(calls), len(api.Items()))
	}
	p, err := e.l.PriorDelivery(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		got := c.D.Ticket
		if got.Title != "Ticket "+id[:8] || got.Body != "body" || got.ID != ticket.IDFor(id) || got.Target != api.name ||
			got.RequestID != id || !got.CreatedAt.Equal(p.Ticket.CreatedAt) {
			t.Fatalf("delivered ticket %+v, want the ledger's %+v", got, p.Ticket)
		}
	}
}

// A message whose request the ledger does not hold is acknowledged without
// calling the API, and the log says which case it is: settled and pruned
// (older than -retention), or never accepted (forged on the subject).
func TestMessageForUnknownRequestSkipped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		retention time.Duration
		want      string
	}{
		{"never accepted", time.Hour, "never accepted"},
		{"pruned", time.Nanosecond, "settled and pruned"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var logs testio.Buffer
			e.log = slog.New(slog.NewTextHandler(&logs, nil))
			api := newKeyedAPI("tracker")
			cfg := testConfig()
			cfg.Retention = c.retention
			e.startForwarder(t, cfg, api)
			tk := ticket.Ticket{
				Request: ticket.Request{RequestID: "never-accepted-1", Tool: "create_ticket", Target: api.name, Title: "ghost", Priority: "normal"},
				ID:      ticket.IDFor("never-accepted-1"), CreatedAt: time.Now().UTC(),
			}
			data, err := json.Marshal(tk)
			if err != nil {
				t.Fatal(err)
			}
			e.publishRaw(t, outbox.SubjectFor(api.name), tk.RequestID, data)
			waitFor(t, 15*time.Second, "the message to be skipped", func() bool {
				return testutil.ToFloat64(e.m.RedeliveredSkipped.WithLabelValues(api.name)) == 1
			})
			e.waitConsumerIdle(t, api.name)
			if n := len(api.Calls()); n != 0 {
				t.Errorf("%d calls for a request the ledger never accepted, want 0", n)
			}
			if _, found, err := e.l.Delivery(context.Background(), tk.RequestID); err != nil || found {
				t.Errorf("delivery record for the unknown request: found %v err %v", found, err)
			}
			if got := logs.String(); !strings.Contains(got, c.want) {
				t.Errorf("the log does not say %q:\n%s", c.want, got)
			}
		})
	}
}

func TestSlowTargetDoesNotHoldUpAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow, fast := newKeyedAPI("slow"), newKeyedAPI("fast")
	held := newGate(t)
	slow.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	cfg := testConfig()
	cfg.Workers = 1 // the slow target's only worker is stuck
	e.startForwarder(t, cfg, slow, fast)
	slowID := e.create(t, slow.name)
	held.WaitArrived(t)

	var fastIDs []string
	for range 3 {
		fastIDs = append(fastIDs, e.create(t, fast.name))
	}
	for _, id := range fastIDs {
		e.waitStatus(t, id, request.StatusDelivered)
	}
	if st := e.find(t, slowID); st.Status == request.StatusDelivered {
		t.Fatalf("slow ticket delivered while its call is held: %+v", st)
	}
	held.Open()
	e.waitStatus(t, slowID, request.StatusDelivered)
	if len(slow.Calls()) != 1 || len(fast.Calls()) != 3 {
		t.Errorf("calls: slow %d fast %d, want 1 and 3", len(slow.Calls()), len(fast.Calls()))
	}
}

func TestShutdownFinishesInFlightDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	held := newGate(t)
	api.hook = func(ctx context.Context, _ int, _ downstream.Delivery) (behaviour, error) {
		held.Wait(ctx)
		return act, nil
	}
	stop := e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	held.WaitArrived(t)

	// The forwarder's pull subscription is on e.nc: when it is gone, the
	// forwarder has seen the cancellation and drained its consumer, and all
	// that keeps Run from returning is the call held in the API.
	subs := e.nc.NumSubscriptions()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, 15*time.Second, "the forwarder to drain its consumer after the cancellation", func() bool {
		return e.nc.NumSubscriptions() < subs
	})
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a delivery was in flight", err)
	default:
	}
	held.Open()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after the in-flight delivery finished")
	}
	// Recorded before Run returned: no waiting here.
	st := e.find(t, id)
	if st.Status != request.StatusDelivered {
		t.Errorf("after shutdown: %+v, want delivered", st)
	}
	calls := api.Calls()
	if len(calls) != 1 || calls[0].CtxErr != nil {
		t.Errorf("calls %+v: want one call whose context was not cancelled by the shutdown", calls)
	}
	// Acked: a new forwarder has nothing to do.
	e.waitConsumerIdle(t, api.name)
}

func TestUndecodableMessageTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	e.publishRaw(t, outbox.SubjectFor(api.name), "", []byte("{garbage"))
	e.publishRaw(t, outbox.SubjectFor(api.name), "", []byte(`{"title":"no request id"}`))

	waitFor(t, 15*time.Second, "two dead letters", func() bool {
		return testutil.ToFloat64(e.m.DeadLetters.WithLabelValues(api.name)) == 2
	})
	e.waitConsumerIdle(t, api.name)
	if n := len(api.Calls()); n != 0 {
		t.Errorf("%d calls for undecodable messages, want 0", n)
	}
	// The consumer goes on with good messages.
	id := e.create(t, api.name)
	e.waitStatus(t, id, request.StatusDelivered)
}

// Without -workers, each target gets its own concurrency: the local target
// asks for more (downstream.Parallel), an API gets the default. Every
// consumer has the same MaxAckPending, far above any worker count: a
// message waiting for its retry counts against it.
func TestWorkersPerTarget(t *testing.T) {
	t.Parallel()
	lt, err := local.Open("files", filepath.Join(t.TempDir(), "tickets.jsonl"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	api := newKeyedAPI("desk")
	for _, tc := range []struct {
		workers         int
		local, apiLimit int
	}{
		{0, lt.Workers(), forwarder.DefaultWorkers},
		{3, 3, 3},
	} {
		e := newEnv(t)
		cfg := testConfig()
		cfg.Workers = tc.workers
		f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, cfg, e.js, e.l, []downstream.Target{lt, api})
		stop := runInBackground(t, "forwarder", f.Run)
		for name, want := range map[string]int{lt.Name(): tc.local, api.name: tc.apiLimit} {
			if got := f.WorkersForTest(name); got != want {
				t.Errorf("-workers %d: %s has %d workers, want %d", tc.workers, name, got, want)
			}
			var got int
			testwait.For(t, 10*time.Second, "consumer "+forwarder.ConsumerName(name), func() bool {
				c, err := e.js.Consumer(context.Background(), "TICKETS", forwarder.ConsumerName(name))
				if err != nil {
					return false
				}
				got = c.CachedInfo().Config.MaxAckPending
				return true
			})
			if got != forwarder.MaxAckPendingForTest || got < 100*want {
				t.Errorf("-workers %d: %s MaxAckPending = %d, want %d", tc.workers, name, got, forwarder.MaxAckPendingForTest)
			}
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// A dispatcher stopped while it is still starting (creating its consumers)
// stops cleanly: Run returns nil, as it does once running.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("desk")
	for i := range 10 {
		f := forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, testConfig(), e.js, e.l, []downstream.Target{api})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: Run = %v after cancellation, want nil", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: Run did not return after cancellation", i)
		}
	}
}
