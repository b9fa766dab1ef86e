package clusterrec_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/ticket"
)

// One request, one answer, on every host: the first host accepts, every
// other host replays the same ticket, other arguments conflict naming it,
// and the record holds the whole ticket.
func TestOneAnswerOnEveryHost(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a, b := newHost(t, js, "host-a", clusterrec.Config{}), newHost(t, js, "host-b", clusterrec.Config{})

	req := newRequest("req-1", "Disk full on db-1")
	first, err := a.front.Create(ctx, req)
	if err != nil || first.Replayed {
		t.Fatalf("first create on a = %+v, %v", first, err)
	}
	again, err := b.front.Create(ctx, req)
	if err != nil || !again.Replayed || again.TicketID != first.TicketID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("retry on b = %+v, %v; want a replay of %s", again, err, first.TicketID)
	}
	if again.Live == nil || again.Live.Status != request.StatusQueued {
		t.Errorf("replay on b: live status %+v, want queued", again.Live)
	}
	other := newRequest("req-1", "something else")
	var conflict *request.ConflictError
	if _, err := b.front.Create(ctx, other); !errors.As(err, &conflict) || conflict.TicketID != first.TicketID {
		t.Fatalf("other arguments on b: %v; want a conflict naming %s", err, first.TicketID)
	}
	// b committed nothing: the request is a's.
	if st, err := b.l.Find(ctx, "", "req-1"); err != nil || st.Status != request.StatusUnknown {
		t.Errorf("b's ledger holds req-1: %+v, %v", st, err)
	}
	if st, err := a.l.Find(ctx, "", "req-1"); err != nil || st.TicketID != first.TicketID {
		t.Errorf("a's ledger: %+v, %v", st, err)
	}
	rec, _, found, err := b.store.Get(ctx, "req-1")
	if err != nil || !found || rec.Phase != clusterrec.PhaseAccepted || rec.Host != "host-a" || rec.Ticket.Title != req.Title {
		t.Fatalf("record = %+v, %v, %v", rec, found, err)
	}
	// find_request on b reads the record.
	if st, err := b.front.Find(ctx, "", "req-1"); err != nil || st.TicketID != first.TicketID || st.Status != request.StatusQueued {
		t.Errorf("find on b = %+v, %v", st, err)
	}
	if st, err := b.front.Find(ctx, "", "never"); err != nil || st.Status != request.StatusUnknown {
		t.Errorf("find of an unknown id on b = %+v, %v", st, err)
	}
	// Subjects: another subject's id is its own request; an anonymous id
	// that spells a subject's scoped id is refused.
	alice := newRequest("req-1", "alice's")
	alice.Subject = "alice"
	if r, err := b.front.Create(ctx, alice); err != nil || r.Replayed || r.TicketID == first.TicketID {
		t.Fatalf("alice's req-1 on b = %+v, %v; want a new request", r, err)
	}
	if _, err := a.front.Create(ctx, newRequest("alice:req-1", "alice's")); !errors.Is(err, request.ErrOtherSubject) {
		t.Errorf("anonymous alice:req-1: %v, want ErrOtherSubject", err)
	}
	if st, err := a.front.Find(ctx, "", "alice:req-1"); err != nil || st.Status != request.StatusUnknown {
		t.Errorf("anonymous find of alice:req-1 = %+v, %v; want unknown", st, err)
	}
}

// A claim whose host never committed (it crashed between the claim and its
// commit) is taken over by a retry on another host once it has stayed
// unaccepted for TakeoverAfter; until then the retry waits, and says so if
// its call ends first. The ticket keeps its first acceptance time.
func TestClaimWithoutCommitIsTakenOver(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	cfg := clusterrec.Config{TakeoverAfter: 2 * time.Second}
	a, b := newHost(t, js, "host-a", cfg), newHost(t, js, "host-b", cfg)
	req := newRequest("req-crash", "left by a crash")
	tk := ticket.Ticket{Request: req, ID: ticket.IDFor(req.Scoped()), CreatedAt: time.Now().Add(-time.Minute).UTC()}
	// a claims and "crashes": no commit, no Accept.
	c, err := a.store.Claim(ctx, tk, req.Hash(), nil)
	if err != nil || !c.Mine {
		t.Fatalf("a's claim = %+v, %v", c, err)
	}
	short, cancel := context.WithTimeout(ctx, cfg.TakeoverAfter/2)
	_, err = b.store.Claim(short, tk, req.Hash(), nil)
	cancel()
	if !errors.Is(err, clusterrec.ErrInProgress) {
		t.Fatalf("a retry shorter than the takeover time: %v, want ErrInProgress", err)
	}
	start := time.Now()
	res, err := b.front.Create(ctx, req)
	if err != nil || res.Replayed || res.TicketID != tk.ID {
		t.Fatalf("retry on b = %+v, %v; want b to take the claim over", res, err)
	}
	if waited := time.Since(start); waited < cfg.TakeoverAfter {
		t.Errorf("b took the claim over after %s, before the takeover time %s", waited, cfg.TakeoverAfter)
	}
	if !res.CreatedAt.Equal(tk.CreatedAt) {
		t.Errorf("taken-over ticket created %s, want the first claim's %s", res.CreatedAt, tk.CreatedAt)
	}
	rec, _, _, err := a.store.Get(ctx, req.Scoped())
	if err != nil || rec.Host != "host-b" || rec.Phase != clusterrec.PhaseAccepted {
		t.Errorf("record after the takeover: %+v, %v", rec, err)
	}
	// A host's own leftover claim (its process restarted) is taken over
	// at once, without waiting out a long takeover time.
	slow := newHost(t, js, "host-c", clusterrec.Config{TakeoverAfter: time.Minute})
	req2 := newRequest("req-own", "own leftover")
	tk2 := ticket.Ticket{Request: req2, ID: ticket.IDFor(req2.Scoped()), CreatedAt: time.Now().UTC()}
	if _, err := slow.store.Claim(ctx, tk2, req2.Hash(), nil); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if res, err := slow.front.Create(ctx, req2); err != nil || res.Replayed {
		t.Fatalf("own leftover claim: %+v, %v", res, err)
	}
	if waited := time.Since(start); waited >= 30*time.Second {
		t.Errorf("c waited %s for its own leftover claim", waited)
	}
}

// A bucket at its size limit refuses a claim with ErrFull and writes
// nothing; a bucket of another installation is refused.
func TestBucketFullAndForeign(t *testing.T) {
	ctx := ctxT(t)
	js := embeddedJS(t)
	a := newHost(t, js, "host-a", clusterrec.Config{MaxBytes: 16 << 10})
	var full error
	for i := range 200 {
		_, err := a.front.Create(ctx, newRequest("fill-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "filling the bucket"))
		if err != nil {
			full = err
			break
		}
	}
	if !errors.Is(full, clusterrec.ErrFull) {
		t.Fatalf("creates into a 16 KiB bucket ended with %v, want ErrFull", full)
	}
	if !strings.Contains(full.Error(), "new requests may fill 90%") {
		t.Errorf("the claim was refused by the server, not by the headroom: %v", full)
	}
	// The headroom keeps room for the records already there: a delivery
	// outcome is still recorded.
	p, err := a.deliv.PriorDelivery(ctx, "fill-aa")
	if err != nil || !p.Accepted {
		t.Fatalf("prior of fill-aa: %+v, %v", p, err)
	}
	if err := a.deliv.RecordDelivery(ctx, request.Delivery{RequestID: "fill-aa", Target: "local", State: "delivered", ExternalID: "x-1"}); err != nil {
		t.Fatalf("a delivery into the full bucket: %v", err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstreamKV("ticketrelay-other-requests", "someone")); err != nil {
		t.Fatal(err)
	}
	if _, err := clusterrec.Open(ctx, archetype.Archetype{Logger: discard()}, js, clusterrec.Config{Installation: "other", Host: "h", Replicas: 1}); !errors.Is(err, clusterrec.ErrForeignBucket) {
		t.Errorf("Open on another installation's bucket: %v, want ErrForeignBucket", err)
	}
}
