package ledger_test

import (
	"context"
	"errors"
	"testing"

	"ticketrelay/request"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// A request_id belongs to its subject: two subjects that choose the same id
// make two requests with two tickets, each replays and conflicts only with
// its own, and neither can read the other's status.
func TestRequestIDBelongsToItsSubject(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	alice, bob := newRequest("shared-id"), newRequest("shared-id")
	alice.Subject, bob.Subject = "alice", "bob"
	bob.Title = "Bob's own ticket"

	ra, err := e.l.Create(ctx, alice)
	if err != nil || ra.Replayed {
		t.Fatalf("alice's create = %+v, %v", ra, err)
	}
	rb, err := e.l.Create(ctx, bob)
	if err != nil || rb.Replayed {
		t.Fatalf("bob's create with alice's id and other arguments = %+v, %v; want a new request", rb, err)
	}
	if ra.TicketID == rb.TicketID {
		t.Fatalf("two subjects got the same ticket %s", ra.TicketID)
	}
	if ra.RequestID != "shared-id" || rb.RequestID != "shared-id" {
		t.Errorf("answers name %q and %q, want the caller's request_id", ra.RequestID, rb.RequestID)
	}
	if got, want := ra.TicketID, ticket.IDFor("alice:shared-id"); got != want {
		t.Errorf("alice's ticket id = %s, want %s (derived from the scoped id)", got, want)
	}

	// Each replays its own; other arguments conflict with its own only.
	if r, err := e.l.Create(ctx, alice); err != nil || !r.Replayed || r.TicketID != ra.TicketID {
		t.Errorf("alice's retry = %+v, %v; want a replay of %s", r, err, ra.TicketID)
	}
	otherArgs := alice
	otherArgs.Title = "something else"
	var conflict *request.ConflictError
	if _, err := e.l.Create(ctx, otherArgs); !errors.As(err, &conflict) || conflict.TicketID != ra.TicketID {
		t.Errorf("alice's id with other arguments: %v; want a conflict naming %s", err, ra.TicketID)
	}

	// Status: each sees its own; a third subject and the anonymous one see nothing.
	for _, c := range []struct {
		subject string
		want    string
	}{{"alice", ra.TicketID}, {"bob", rb.TicketID}, {"mallory", ""}, {"", ""}} {
		st, err := e.l.Find(ctx, c.subject, "shared-id")
		if err != nil {
			t.Fatal(err)
		}
		if st.TicketID != c.want || (c.want == "") != (st.Status == request.StatusUnknown) {
			t.Errorf("Find(%q) = %s %s, want ticket %q", c.subject, st.Status, st.TicketID, c.want)
		}
		if st.RequestID != "shared-id" {
			t.Errorf("Find(%q) names %q, want the caller's request_id", c.subject, st.RequestID)
		}
	}

	// The outbox carries the scoped ids: distinct Nats-Msg-Ids, and the
	// operators' name for each request.
	db := fixture.Raw(t, e.path)
	if n := fixture.Count(t, db, `SELECT count(*) FROM outbox WHERE request_id IN ('alice:shared-id', 'bob:shared-id')`); n != 2 {
		t.Errorf("outbox rows under the scoped ids: %d, want 2", n)
	}
	if st, err := e.l.FindScoped(ctx, "bob:shared-id"); err != nil || st.TicketID != rb.TicketID {
		t.Errorf("FindScoped(bob:shared-id) = %+v, %v", st, err)
	}
}

// An anonymous request_id that spells another subject's scoped id never
// answers for that subject's request: it is refused, and names nothing.
func TestAnonymousIDSpellingAScopedIDIsRefused(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, dbPath(t))
	alice := newRequest("x")
	alice.Subject = "alice"
	if _, err := e.l.Create(ctx, alice); err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{"same", "other"} {
		anon := newRequest("alice:x")
		if args == "other" {
			anon.Title = "other"
		}
		res, err := e.l.Create(ctx, anon)
		if !errors.Is(err, request.ErrOtherSubject) {
			t.Fatalf("anonymous alice:x (%s arguments) = %+v, %v; want ErrOtherSubject", args, res, err)
		}
	}
	if st, err := e.l.Find(ctx, "", "alice:x"); err != nil || st.Status != request.StatusUnknown {
		t.Errorf("anonymous Find(alice:x) = %+v, %v; want unknown", st, err)
	}
	if n := fixture.Count(t, fixture.Raw(t, e.path), `SELECT count(*) FROM requests`); n != 1 {
		t.Errorf("%d ledger rows, want 1", n)
	}
}
