package clusterrec_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/internal/archetype"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// twoHosts are hosts a and b of one installation on an embedded JetStream,
// with their heartbeat services: a beat every 100 ms, lost after 1 s
// without one. Nothing runs until a test calls RunOnce.
func twoHosts(t *testing.T) (a, b *host, ha, hb *clusterrec.Hosts) {
	js := embeddedJS(t)
	a, b = newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	none := func(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
	cfg := clusterrec.HostsConfig{Every: 100 * time.Millisecond, DeadAfter: time.Second, Slack: time.Second}
	ha = clusterrec.NewHosts(archetype.Archetype{Logger: discard()}, cfg, a.store, a.l, none)
	hb = clusterrec.NewHosts(archetype.Archetype{Logger: discard()}, cfg, b.store, b.l, none)
	return a, b, ha, hb
}

// A host whose dispatcher is lost: its unpublished requests are adopted
// by another host (its ledger commits them); its front then refuses new
// requests; and a request its front accepted after the adoption, before
// it noticed, is adopted by the next round.
func TestLostHostIsAdoptedAgainUntilQuiet(t *testing.T) {
	ctx := ctxT(t)
	a, b, ha, hb := twoHosts(t)
	if err := hb.RunOnce(ctx); err != nil { // b beats once, then its dispatcher is gone
		t.Fatal(err)
	}
	if _, err := b.front.Create(ctx, newRequest("left-1", "accepted by b, never published")); err != nil {
		t.Fatal(err)
	}
	held := func(id string) bool {
		st, err := a.l.Find(ctx, "", id)
		return err == nil && st.Status != request.StatusUnknown
	}
	if held("left-1") {
		t.Fatal("a holds left-1 before b is lost")
	}
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return held("left-1")
	}) {
		t.Fatal("a never adopted left-1")
	}
	rec, _, _, err := a.store.Get(ctx, "left-1")
	if err != nil || rec.Host != "host-a" {
		t.Fatalf("record after adoption: %+v, %v", rec, err)
	}
	// b's front refuses once it sees itself adopted.
	var refusal error
	if !testwait.Until(10*time.Second, func() bool {
		_, refusal = b.front.Create(ctx, newRequest("after-adoption", "refused"))
		return refusal != nil
	}) || !errors.Is(refusal, clusterrec.ErrOrphaned) {
		t.Fatalf("b's front after its adoption: %v, want ErrOrphaned", refusal)
	}
	// It still answers what needs no delivery of its own: a replay of a
	// request accepted before, and a conflict.
	if res, err := b.front.Create(ctx, newRequest("left-1", "accepted by b, never published")); err != nil || !res.Replayed {
		t.Fatalf("a replay on the adopted host: %+v, %v; want replayed", res, err)
	}
	var conflict *request.ConflictError
	if _, err := b.front.Create(ctx, newRequest("left-1", "other arguments")); !errors.As(err, &conflict) {
		t.Fatalf("a conflict on the adopted host: %v, want ConflictError", err)
	}
	// A request b's front accepted in the moment before it noticed: the
	// next rounds adopt it too.
	late := newRequest("left-2", "accepted by b after the adoption")
	tk := ticket.Ticket{Request: late, ID: ticket.IDFor(late.Scoped()), CreatedAt: time.Now().UTC()}
	if _, err := b.store.Claim(ctx, tk, late.Hash(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.CreateAt(ctx, late, late.Hash(), tk.CreatedAt); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return held("left-2")
	}) {
		t.Fatal("a never adopted left-2, accepted by b after the first adoption")
	}
}

// An unaccepted claim (its host was cut between claim and commit) is
// unknown to find_request, not queued: the agent is told to call again,
// and the call completes it.
func TestInterruptedClaimIsUnknownUntilRetried(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{TakeoverAfter: 500 * time.Millisecond}), newHost(t, js, "host-b", clusterrec.Config{TakeoverAfter: 500 * time.Millisecond})
	req := newRequest("cut-1", "cut after its claim")
	tk := ticket.Ticket{Request: req, ID: ticket.IDFor(req.Scoped()), CreatedAt: time.Now().UTC()}
	if _, err := a.store.Claim(ctx, tk, req.Hash(), nil); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*host{a, b} {
		st, err := h.front.Find(ctx, "", "cut-1")
		if err != nil || st.Status != request.StatusUnknown || st.TicketID != "" {
			t.Fatalf("find on %s of an interrupted claim = %+v, %v; want unknown", h.id, st, err)
		}
	}
	res, err := b.front.Create(ctx, req)
	if err != nil || res.TicketID != tk.ID {
		t.Fatalf("the retry = %+v, %v", res, err)
	}
	if st, err := a.front.Find(ctx, "", "cut-1"); err != nil || st.Status != request.StatusQueued || st.TicketID != tk.ID {
		t.Fatalf("find after the retry = %+v, %v; want queued %s", st, err, tk.ID)
	}
}

// A host removed for good is forgotten (its heartbeat deleted) only once
// the other hosts have finished adopting it: not while it is live, not
// right after its first adoption. Forgotten, it is no longer listed; run
// again, it beats and rejoins.
func TestForgetHostOnlyOnceFinished(t *testing.T) {
	ctx := ctxT(t)
	a, _, ha, hb := twoHosts(t)
	if err := hb.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.store.ForgetHost(ctx, "host-b"); !errors.Is(err, clusterrec.ErrHostNotFinished) {
		t.Fatalf("forgetting a live host: %v, want ErrHostNotFinished", err)
	}
	seen := func() map[string]clusterrec.HostSeen {
		hosts, err := a.store.HostsSeen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]clusterrec.HostSeen{}
		for _, h := range hosts {
			m[h.Host] = h
		}
		return m
	}
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return seen()["host-b"].Heartbeat.State == clusterrec.HostAdopted
	}) {
		t.Fatal("a never adopted b")
	}
	if err := a.store.ForgetHost(ctx, "host-b"); !errors.Is(err, clusterrec.ErrHostNotFinished) {
		t.Fatalf("forgetting a host after its first adoption: %v, want ErrHostNotFinished", err)
	}
	if !testwait.Until(30*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return seen()["host-b"].Finished()
	}) {
		t.Fatalf("b's adoption never finished: %+v", seen()["host-b"])
	}
	if err := a.store.ForgetHost(ctx, "host-b"); err != nil {
		t.Fatalf("forgetting a host whose adoption finished: %v", err)
	}
	if h, ok := seen()["host-b"]; ok {
		t.Fatalf("b still listed after it was forgotten: %+v", h)
	}
	if _, ok := seen()["host-a"]; !ok {
		t.Fatal("forgetting b took a's heartbeat too")
	}
	if err := a.store.ForgetHost(ctx, "host-b"); !errors.Is(err, clusterrec.ErrHostUnknown) {
		t.Fatalf("forgetting b twice: %v, want ErrHostUnknown", err)
	}
	if err := hb.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if st := seen()["host-b"].Heartbeat.State; st != clusterrec.HostLive {
		t.Fatalf("b after it beat again: %q, want live", st)
	}
}

// A NATS outage stops every host's beats alike: a host that could not
// beat while nobody could is not lost. Its silence counts only the time
// the observer itself could beat; once it is really gone, it is adopted
// -host-dead-after later.
func TestOutageMakesNoLiveHostLost(t *testing.T) {
	ctx := ctxT(t)
	store := filepath.Join(t.TempDir(), "nats")
	ns, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: store}, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	listen := ns.Addr().String()
	js := connectJS(t, ns.ClientURL())
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	none := func(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
	cfg := clusterrec.HostsConfig{Every: 100 * time.Millisecond, DeadAfter: time.Second, Slack: time.Second}
	res, err := b.front.Create(ctx, newRequest("b-1", "accepted by b, not yet published"))
	if err != nil {
		t.Fatal(err)
	}
	unpublished := func(context.Context) (time.Time, bool, error) { return res.CreatedAt, true, nil }
	ha := clusterrec.NewHosts(archetype.Archetype{Logger: discard()}, cfg, a.store, a.l, none)
	hb := clusterrec.NewHosts(archetype.Archetype{Logger: discard()}, cfg, b.store, b.l, unpublished)
	for _, h := range []*clusterrec.Hosts{ha, hb, ha, hb} {
		if err := h.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The outage: the only node is down for twice the dead-after time.
	ns.Shutdown()
	ns.WaitForShutdown()
	down := time.Now()
	if err := ha.RunOnce(ctx); err == nil {
		t.Fatal("a round succeeded with the server down")
	}
	time.Sleep(2*cfg.DeadAfter - time.Since(down)) // the outage's length, not a wait for a result
	ns, err = natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: listen, StoreDir: store}, discard())
	if err != nil {
		t.Fatal(err)
	}
	// a's first round after the outage comes before b's first beat: b's
	// entry is older than the dead-after time.
	if !testwait.Until(20*time.Second, func() bool { return ha.RunOnce(ctx) == nil }) {
		t.Fatal("a's rounds never succeeded after the server came back")
	}
	stateOf := func(id string) string {
		hosts, err := a.store.HostsSeen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hosts {
			if h.Host == id {
				return h.Heartbeat.State
			}
		}
		return ""
	}
	if st := stateOf("host-b"); st != clusterrec.HostLive {
		t.Fatalf("b after the outage: %q, want live (it could not beat while nobody could)", st)
	}
	if st, err := a.l.Find(ctx, "", "b-1"); err != nil || st.Status != request.StatusUnknown {
		t.Fatalf("a adopted b's request after the outage: %+v, %v", st, err)
	}
	// b beats again; then it is gone for good and a adopts it.
	if err := hb.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return stateOf("host-b") == clusterrec.HostAdopted
	}) {
		t.Fatalf("a never adopted b once it was gone: %q", stateOf("host-b"))
	}
	if st, err := a.l.Find(ctx, "", "b-1"); err != nil || st.Status == request.StatusUnknown {
		t.Fatalf("a's ledger after adopting b: %+v, %v", st, err)
	}
}

// An adoption cut off part-way (its host killed) is taken over by another
// host once the adopter stops renewing its mark, a few heartbeat periods
// later: not a whole dead-after time.
func TestPartWayAdoptionIsTakenOver(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})
	none := func(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
	// A dead-after time longer than the test: only the lease can end it.
	cfg := clusterrec.HostsConfig{Every: 100 * time.Millisecond, DeadAfter: 10 * time.Minute, Slack: time.Second}
	ha := clusterrec.NewHosts(archetype.Archetype{Logger: discard()}, cfg, a.store, a.l, none)
	if _, err := b.front.Create(ctx, newRequest("b-1", "accepted by b, never published")); err != nil {
		t.Fatal(err)
	}
	// host-c began adopting b and was killed: its mark stays.
	kv, err := js.KeyValue(ctx, installation.Name("test").Bucket())
	if err != nil {
		t.Fatal(err)
	}
	mark, _ := json.Marshal(clusterrec.Heartbeat{Host: "host-b", Watermark: time.Now().UTC(), State: clusterrec.HostAdopting, By: "host-c"})
	if _, err := kv.Put(ctx, "h.host-b", mark); err != nil {
		t.Fatal(err)
	}
	// A round whose lease renewal failed (a slow bucket) leaves the mark
	// "adopting" by a and goes on the next round: wait for the end state.
	var last clusterrec.Heartbeat
	if !testwait.Until(20*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := a.l.Find(ctx, "", "b-1")
		if err != nil || st.Status == request.StatusUnknown {
			return false
		}
		hosts, err := a.store.HostsSeen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hosts {
			if h.Host == "host-b" {
				last = h.Heartbeat
			}
		}
		return last.State == clusterrec.HostAdopted && last.By == "host-a"
	}) {
		t.Fatalf("a never took over host-c's part-way adoption of b: b's mark %+v", last)
	}
}

// A host whose dispatcher never beat (killed at start, or never started)
// while its front accepted: the front wrote the host's heartbeat before
// its first claim, so the other hosts find the host silent and adopt what
// it accepted. Before, a host without a heartbeat was never looked at,
// and its requests waited for a dispatcher that might never come.
func TestHostThatNeverBeatIsAdopted(t *testing.T) {
	ctx := ctxT(t)
	a, b, ha, _ := twoHosts(t)
	if err := ha.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.front.Create(ctx, newRequest("early-1", "accepted before b's dispatcher beat")); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(10*time.Second, func() bool {
		if err := ha.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := a.l.Find(ctx, "", "early-1")
		return err == nil && st.Status != request.StatusUnknown
	}) {
		t.Fatal("a never adopted what b's front accepted before b's first beat")
	}
	if rec, _, _, err := a.store.Get(ctx, "early-1"); err != nil || rec.Host != "host-a" {
		t.Fatalf("record after adoption: %+v, %v", rec, err)
	}
}
