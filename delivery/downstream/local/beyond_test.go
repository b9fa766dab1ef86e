package local_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
)

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		path := filepath.Join(t.TempDir(), "tickets.jsonl")
		tg := open(t, path)
		n := 0
		return downstreamtest.UpdateHarness{
			Target: tg,
			NewTicket: func() string {
				n++
				return deliver(t, tg, fmt.Sprintf("req-%d", n)).ExternalID
			},
			// The file's view: every update line of the ticket, in order.
			Read: func(ref string) downstream.Update {
				var cur downstream.Update
				for _, l := range lines(t, path) {
					if l.Update == nil || l.Update.Ticket != ref {
						continue
					}
					s := l.Update.Set
					if s.Status != "" {
						cur.Status = s.Status
					}
					if s.Priority != "" {
						cur.Priority = s.Priority
					}
					if s.Labels != nil {
						cur.Labels = s.Labels
					}
					if s.Assignee != nil {
						cur.Assignee = s.Assignee
					}
				}
				return cur
			},
			Sample:  downstream.Update{Status: downstream.StatusClosed, Priority: "high", Labels: &[]string{"x"}, Assignee: new("me")},
			Missing: "line-4242",
			BadRefs: []string{"4", "line-0", "line-01", "file:///elsewhere.jsonl#L1"},
		}
	})
}

// A comment is a line; the same key again writes nothing and answers the
// same line, also after a restart; the lookup finds it; a reference must
// name a ticket line of this file.
func TestComments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	tg := open(t, path)
	ctx := context.Background()
	r := deliver(t, tg, "req-1")
	d := downstreamtest.NewComment("c-1", r.URL)
	c1, err := tg.AddComment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if caps := tg.CommentCapabilities(); !caps.DedupeKey || caps.Lookup != downstream.LookupConsistent {
		t.Fatalf("comment capabilities %+v; want keyed and consistent", caps)
	}
	tg.Close()
	tg = open(t, path)
	d.Attempt = 2
	c2, err := tg.AddComment(ctx, d)
	if err != nil || c2 != c1 {
		t.Fatalf("resend after a restart = %+v, %v; want %+v", c2, err, c1)
	}
	if got, ok, err := tg.FindComment(ctx, d); err != nil || !ok || got != c1 {
		t.Fatalf("FindComment = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := tg.FindComment(ctx, downstreamtest.NewComment("c-never", r.ExternalID)); err != nil || ok {
		t.Fatalf("FindComment of a key never written: %v, %v", ok, err)
	}
	ls := lines(t, path)
	if len(ls) != 2 || ls[1].Comment == nil || ls[1].Comment.Ticket != r.ExternalID || !strings.Contains(ls[1].Comment.Body, "toner") {
		t.Fatalf("lines %+v; want the ticket and one comment on it", ls)
	}
	for _, bad := range []string{c1.ExternalID, "line-3", "", "req-1"} {
		_, err := tg.AddComment(ctx, downstreamtest.NewComment("c-bad", bad))
		if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent {
			t.Errorf("a comment on %q: %v; want permanent", bad, err)
		}
	}
	if n := len(lines(t, path)); n != 2 {
		t.Fatalf("refused comments wrote lines: %d, want 2", n)
	}
}
