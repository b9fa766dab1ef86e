package downstreamtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
)

// CommentHarness is one commenting adapter wired to a fresh fake of its API.
type CommentHarness struct {
	// Target is a downstream.Commenter talking to the fake.
	Target downstream.Target
	// Faults is the fake's injector for comment requests.
	Faults *Faults
	// NewTicket files a ticket in the fake (not through the adapter) and
	// returns the reference a create's receipt would give.
	NewTicket func() string
	// Comments returns the bodies of the ticket's comments, oldest first.
	Comments func(ref string) []string
	// Seed adds n comments by someone else to the ticket.
	Seed func(ref string, n int)
	// PageSize is the most comments the API lists on one page, whatever
	// the adapter asks for: Seed fills more than a page before the
	// comment that is looked up.
	PageSize int
	// Settle lets the API's documented lag pass (for a lookup that lags:
	// LookupEventual); nil for an API without one.
	Settle func()
	// Missing is a well-formed reference to a ticket the fake lacks.
	Missing string
	// BadRefs are references the adapter must refuse without a call.
	BadRefs []string
	// BadAuth talks to the same fake with credentials it rejects.
	BadAuth downstream.Target
}

// NewComment returns the first attempt of a comment with the given
// request id on ticket ref; its Key is downstream.Key("test", requestID).
func NewComment(requestID, ref string) downstream.CommentDelivery {
	return downstream.CommentDelivery{Key: downstream.Key("test", requestID), Attempt: 1, Ticket: ref,
		Body: "Found it: the toner cartridge was upside down.\nComment " + requestID + "."}
}

// RunComments is the conformance suite of downstream.Commenter.
func RunComments(t *testing.T, newHarness func(t *testing.T) CommentHarness) {
	commenter := func(t *testing.T, h CommentHarness) downstream.Commenter {
		c, ok := h.Target.(downstream.Commenter)
		if !ok {
			t.Fatalf("%T is no downstream.Commenter", h.Target)
		}
		return c
	}
	t.Run("comment once", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		ref := h.NewTicket()
		d := NewComment("c-once", ref)
		r := addComment(t, c, d)
		if r.URL == "" {
			t.Fatalf("receipt %+v has no URL", r)
		}
		got := h.Comments(ref)
		if len(got) != 1 || !strings.Contains(got[0], strings.TrimSpace(d.Body)) {
			t.Fatalf("the ticket's comments are %q, want one holding %q", got, d.Body)
		}
		d.Attempt = 2
		switch caps := c.CommentCapabilities(); {
		case caps.DedupeKey:
			r2 := addComment(t, c, d)
			if r2.ExternalID != r.ExternalID {
				t.Fatalf("resend answered %+v, first answer %+v", r2, r)
			}
		case caps.Lookup != downstream.LookupNone:
			if h.Settle != nil {
				h.Settle()
			}
			found, ok := findComment(t, c, d)
			if !ok || found.ExternalID != r.ExternalID {
				t.Fatalf("FindComment after the comment = %+v, %v; want %+v", found, ok, r)
			}
			if other, ok := findComment(t, c, NewComment("c-never-sent", ref)); ok {
				t.Fatalf("FindComment of a key never sent found %+v", other)
			}
		}
		if n := len(h.Comments(ref)); n != 1 {
			t.Fatalf("after a resend the ticket has %d comments, want 1", n)
		}
	})

	t.Run("lost answer", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		ref := h.NewTicket()
		d := NewComment("c-lost", ref)
		lostComment(t, h, c, d, LoseResponse, 1)
		if !secondComment(t, h, c, d) {
			if caps := c.CommentCapabilities(); caps.DedupeKey || caps.Lookup == downstream.LookupConsistent {
				t.Fatalf("capabilities %+v allow settling the comment, yet nothing settled it", caps)
			}
		}
		if n := len(h.Comments(ref)); n != 1 {
			t.Fatalf("after the second attempt the ticket has %d comments, want exactly 1", n)
		}
	})

	t.Run("reset before processing", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		ref := h.NewTicket()
		d := NewComment("c-reset", ref)
		lostComment(t, h, c, d, ResetBeforeProcessing, 0)
		if secondComment(t, h, c, d) {
			if n := len(h.Comments(ref)); n != 1 {
				t.Fatalf("after the second attempt the ticket has %d comments, want 1", n)
			}
		}
	})

	t.Run("lookup past the first page", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		if _, ok := c.(downstream.CommentFinder); !ok || c.CommentCapabilities().Lookup == downstream.LookupNone {
			t.Skip("no comment lookup")
		}
		ref := h.NewTicket()
		h.Seed(ref, 2*h.PageSize+3)
		d := NewComment("c-paged", ref)
		lostComment(t, h, c, d, LoseResponse, 2*h.PageSize+4)
		if h.Settle != nil {
			h.Settle()
		}
		if _, ok := findComment(t, c, d); !ok {
			t.Fatalf("FindComment missed a comment behind %d others (pages of %d)", 2*h.PageSize+3, h.PageSize)
		}
		if r, ok := findComment(t, c, NewComment("c-paged-never", ref)); ok {
			t.Fatalf("FindComment of a key never sent found %+v", r)
		}
	})

	t.Run("500", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		ref := h.NewTicket()
		h.Faults.Next(ServerError)
		e := commentErr(t, c, NewComment("c-500", ref))
		if e.Class != downstream.Transient || e.StatusCode != 500 || !e.MayHaveActed {
			t.Fatalf("500: got %s HTTP %d (may have acted %v), want transient 500 that may have acted", e.Class, e.StatusCode, e.MayHaveActed)
		}
	})

	t.Run("bad references", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		ref := h.NewTicket()
		if _, err := c.ParseTicket(ref); err != nil {
			t.Fatalf("ParseTicket(%q) of the fake's own ticket: %v", ref, err)
		}
		served := h.Faults.Served()
		for _, bad := range append(slices.Clone(h.BadRefs), "") {
			if r, err := c.ParseTicket(bad); err == nil {
				t.Errorf("ParseTicket(%q) = %+v; want an error", bad, r)
			}
			e := commentErr(t, c, NewComment("c-badref", bad))
			if e.Class != downstream.Permanent {
				t.Errorf("a comment on %q: %s error, want permanent: %v", bad, e.Class, e)
			}
		}
		if n := h.Faults.Served(); n != served {
			t.Fatalf("bad references made %d comment calls; want none", n-served)
		}
		if n := len(h.Comments(ref)); n != 0 {
			t.Fatalf("the ticket has %d comments, want 0", n)
		}
	})

	t.Run("missing ticket", func(t *testing.T) {
		h := newHarness(t)
		e := commentErr(t, commenter(t, h), NewComment("c-missing", h.Missing))
		if e.Class != downstream.Permanent || e.MayHaveActed {
			t.Fatalf("a comment on a ticket the API lacks: %s (may have acted %v), want permanent: %v", e.Class, e.MayHaveActed, e)
		}
	})

	t.Run("empty comment", func(t *testing.T) {
		h := newHarness(t)
		c := commenter(t, h)
		ref := h.NewTicket()
		d := NewComment("c-empty", ref)
		d.Body = " \n "
		if e := commentErr(t, c, d); e.Class != downstream.Permanent {
			t.Fatalf("an empty comment: %s, want permanent: %v", e.Class, e)
		}
		if n := len(h.Comments(ref)); n != 0 {
			t.Fatalf("the ticket has %d comments, want 0", n)
		}
	})

	t.Run("bad credentials", func(t *testing.T) {
		h := newHarness(t)
		ref := h.NewTicket()
		e := commentErr(t, commenter(t, h.withTarget(h.BadAuth)), NewComment("c-auth", ref))
		if e.Class != downstream.Auth || e.MayHaveActed {
			t.Fatalf("bad credentials: got %s (may have acted %v), want auth: %v", e.Class, e.MayHaveActed, e)
		}
		if n := len(h.Comments(ref)); n != 0 {
			t.Fatalf("the ticket has %d comments, want 0", n)
		}
	})
}

func (h CommentHarness) withTarget(t downstream.Target) CommentHarness {
	h.Target = t
	return h
}

// lostComment makes the next comment call fail with fault, checks that the
// adapter reports a transient error that may have acted, and that the
// ticket then holds n comments.
func lostComment(t *testing.T, h CommentHarness, c downstream.Commenter, d downstream.CommentDelivery, fault Fault, n int) {
	t.Helper()
	h.Faults.Next(fault)
	e := commentErr(t, c, d)
	if e.Class != downstream.Transient || !e.MayHaveActed {
		t.Fatalf("%s: got %s (may have acted %v), want transient that may have acted: %v", fault, e.Class, e.MayHaveActed, e)
	}
	if got := len(h.Comments(d.Ticket)); got != n {
		t.Fatalf("%s: the ticket holds %d comments, want %d", fault, got, n)
	}
}

// secondComment does what the forwarder does after a comment of unknown
// outcome; it reports whether the outcome was settled.
func secondComment(t *testing.T, h CommentHarness, c downstream.Commenter, d downstream.CommentDelivery) bool {
	t.Helper()
	d.Attempt = 2
	caps := c.CommentCapabilities()
	switch {
	case caps.DedupeKey:
		addComment(t, c, d)
		return true
	case caps.Lookup == downstream.LookupConsistent || caps.Lookup == downstream.LookupEventual && h.Settle != nil:
		if h.Settle != nil {
			h.Settle()
		}
		if _, found := findComment(t, c, d); !found {
			addComment(t, c, d)
		}
		return true
	case caps.Lookup == downstream.LookupEventual:
		// Found settles it; a miss proves nothing: uncertain, never resent.
		_, found := findComment(t, c, d)
		return found
	}
	return false
}

func addComment(t *testing.T, c downstream.Commenter, d downstream.CommentDelivery) downstream.CommentReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.AddComment(ctx, d)
	if err != nil {
		t.Fatalf("AddComment (attempt %d): %v", d.Attempt, err)
	}
	return r
}

func commentErr(t *testing.T, c downstream.Commenter, d downstream.CommentDelivery) *downstream.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.AddComment(ctx, d)
	return wantError(t, "AddComment", r, err)
}

func findComment(t *testing.T, c downstream.Commenter, d downstream.CommentDelivery) (downstream.CommentReceipt, bool) {
	t.Helper()
	f, ok := c.(downstream.CommentFinder)
	if !ok {
		t.Fatalf("%T declares a comment lookup but is no downstream.CommentFinder", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, found, err := f.FindComment(ctx, d)
	if err != nil {
		t.Fatalf("FindComment: %v", err)
	}
	return r, found
}

func wantError(t *testing.T, call string, r any, err error) *downstream.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded (%+v); want an error", call, r)
	}
	var e *downstream.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s returned %T (%v); want a *downstream.Error", call, err, err)
	}
	return e
}

// UpdateHarness is one updating adapter wired to a fresh fake of its API.
type UpdateHarness struct {
	// Target is a downstream.Updater talking to the fake.
	Target downstream.Target
	// NewTicket files an open ticket in the fake and returns its reference.
	NewTicket func() string
	// Read returns the ticket's fields as the fake holds them, for the
	// fields the target sets (the others zero).
	Read func(ref string) downstream.Update
	// Sample sets every field the target sets to values the fake knows,
	// status closed, and differs from a new ticket in each.
	Sample downstream.Update
	// Missing is a well-formed reference to a ticket the fake lacks.
	Missing string
	// BadRefs are references the adapter must refuse without a call.
	BadRefs []string
	// NoReopen: the API cannot reopen a closed ticket (PagerDuty): setting
	// status open on one is a Permanent error.
	NoReopen bool
}

// RunUpdates is the conformance suite of downstream.Updater.
func RunUpdates(t *testing.T, newHarness func(t *testing.T) UpdateHarness) {
	updater := func(t *testing.T, h UpdateHarness) downstream.Updater {
		u, ok := h.Target.(downstream.Updater)
		if !ok {
			t.Fatalf("%T is no downstream.Updater", h.Target)
		}
		return u
	}
	t.Run("set twice is set once", func(t *testing.T) {
		h := newHarness(t)
		u := updater(t, h)
		ref := h.NewTicket()
		want, err := downstream.CheckUpdate("t", u.UpdateFields(), h.Sample)
		if err != nil {
			t.Fatalf("the harness's sample: %v", err)
		}
		if fs := h.Sample.Fields(); !slices.Equal(fs, u.UpdateFields()) {
			t.Fatalf("the sample sets %v; the target sets %v", fs, u.UpdateFields())
		}
		if before := h.Read(ref); reflect.DeepEqual(before, want) {
			t.Fatalf("a new ticket already reads %+v", show(before))
		}
		for i := range 2 {
			update(t, u, downstream.UpdateDelivery{Key: downstream.Key("test", "u-twice"), Attempt: i + 1, Ticket: ref, Set: h.Sample})
			if got := h.Read(ref); !reflect.DeepEqual(got, want) {
				t.Fatalf("after update %d the ticket reads %s, want %s", i+1, show(got), show(want))
			}
		}
		if !slices.Contains(u.UpdateFields(), downstream.FieldStatus) {
			return
		}
		if h.NoReopen {
			e := updateErr(t, u, downstream.UpdateDelivery{Key: downstream.Key("test", "u-reopen"), Attempt: 1, Ticket: ref,
				Set: downstream.Update{Status: downstream.StatusOpen}})
			if e.Class != downstream.Permanent || h.Read(ref).Status != downstream.StatusClosed {
				t.Fatalf("reopening where the API cannot: %s error (%v), status now %q; want permanent, still closed", e.Class, e, h.Read(ref).Status)
			}
			return
		}
		for _, st := range []downstream.Status{downstream.StatusOpen, downstream.StatusOpen, downstream.StatusClosed} {
			update(t, u, downstream.UpdateDelivery{Key: downstream.Key("test", "u-"+string(st)), Attempt: 1, Ticket: ref,
				Set: downstream.Update{Status: st}})
			if got := h.Read(ref).Status; got != st {
				t.Fatalf("after setting status %s the ticket reads %q", st, got)
			}
		}
	})

	t.Run("refused fields", func(t *testing.T) {
		h := newHarness(t)
		u := updater(t, h)
		ref := h.NewTicket()
		before := h.Read(ref)
		for _, f := range downstream.Fields {
			if slices.Contains(u.UpdateFields(), f) {
				continue
			}
			set := downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Labels: &[]string{"x"}, Assignee: new("someone")}
			only := map[downstream.Field]downstream.Update{
				downstream.FieldStatus: {Status: set.Status}, downstream.FieldPriority: {Priority: set.Priority},
				downstream.FieldLabels: {Labels: set.Labels}, downstream.FieldAssignee: {Assignee: set.Assignee},
			}[f]
			e := updateErr(t, u, downstream.UpdateDelivery{Key: "k", Attempt: 1, Ticket: ref, Set: only})
			if e.Class != downstream.Permanent || !strings.Contains(e.Error(), string(f)) {
				t.Errorf("setting %s, which the target lacks: %s error %q, want permanent naming the field", f, e.Class, e)
			}
		}
		for _, bad := range []downstream.Update{{}, {Status: "resolved"}, {Priority: "critical"}, {Labels: &[]string{"ticketrelay-x"}}} {
			if e := updateErr(t, u, downstream.UpdateDelivery{Key: "k", Attempt: 1, Ticket: ref, Set: bad}); e.Class != downstream.Permanent {
				t.Errorf("update %s: %s error, want permanent: %v", show(bad), e.Class, e)
			}
		}
		if after := h.Read(ref); !reflect.DeepEqual(after, before) {
			t.Fatalf("refused updates changed the ticket: %s, was %s", show(after), show(before))
		}
	})

	t.Run("bad references", func(t *testing.T) {
		h := newHarness(t)
		u := updater(t, h)
		for _, bad := range append(slices.Clone(h.BadRefs), "") {
			e := updateErr(t, u, downstream.UpdateDelivery{Key: "k", Attempt: 1, Ticket: bad, Set: h.Sample})
			if e.Class != downstream.Permanent {
				t.Errorf("an update of %q: %s error, want permanent: %v", bad, e.Class, e)
			}
		}
		e := updateErr(t, u, downstream.UpdateDelivery{Key: "k", Attempt: 1, Ticket: h.Missing, Set: h.Sample})
		if e.Class != downstream.Permanent || e.MayHaveActed {
			t.Fatalf("an update of a ticket the API lacks: %s (may have acted %v), want permanent: %v", e.Class, e.MayHaveActed, e)
		}
	})
}

func show(u downstream.Update) string {
	s := fmt.Sprintf("{status %q priority %q", u.Status, u.Priority)
	if u.Labels != nil {
		s += fmt.Sprintf(" labels %q", *u.Labels)
	}
	if u.Assignee != nil {
		s += fmt.Sprintf(" assignee %q", *u.Assignee)
	}
	return s + "}"
}

func update(t *testing.T, u downstream.Updater, d downstream.UpdateDelivery) downstream.Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := u.Update(ctx, d)
	if err != nil {
		t.Fatalf("Update %s (attempt %d): %v", show(d.Set), d.Attempt, err)
	}
	return r
}

func updateErr(t *testing.T, u downstream.Updater, d downstream.UpdateDelivery) *downstream.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := u.Update(ctx, d)
	return wantError(t, "Update", r, err)
}

// ID reads a reference that is a number (an issue's or a ticket's, as a
// receipt gives it), failing the test otherwise.
func ID(t testing.TB, ref string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		t.Fatalf("reference %q: %v", ref, err)
	}
	return n
}
