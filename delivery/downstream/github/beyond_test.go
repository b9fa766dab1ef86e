package github_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/github/githubtest"
)

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := githubtest.New(t, "acme", "support", token)
		return downstreamtest.CommentHarness{
			Target:    newTarget(t, f.URL(), token),
			Faults:    &f.CommentFaults,
			NewTicket: func() string { return strconv.FormatInt(f.AddIssue("Printer on fire"), 10) },
			Comments: func(ref string) []string {
				is, _ := f.Issue(downstreamtest.ID(t, ref))
				var out []string
				for _, c := range is.Comments {
					out = append(out, c.Body)
				}
				return out
			},
			Seed:     func(ref string, n int) { f.AddComments(downstreamtest.ID(t, ref), n) },
			PageSize: github.CommentsPerPage,
			Missing:  "4242",
			BadRefs: []string{"abc", "0", "#", "acme/other#1", "other/support#1", "https://github.com/acme/support/issues/1",
				f.URL() + "/acme/other/issues/1", f.URL() + "/acme/support/pull/1", "PROJ-1", "1 2"},
			BadAuth: newTarget(t, f.URL(), "revoked"),
		}
	})
}

func readIssue(t *testing.T, f *githubtest.Fake) func(string) downstream.Update {
	return func(ref string) downstream.Update {
		is, ok := f.Issue(downstreamtest.ID(t, ref))
		if !ok {
			t.Fatalf("no issue %s", ref)
		}
		var labels []string
		for _, l := range is.Labels {
			if !strings.HasPrefix(l, "ticketrelay-") {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		if labels == nil {
			labels = []string{}
		}
		assignee := ""
		if len(is.Assignees) > 0 {
			assignee = strings.Join(is.Assignees, ",")
		}
		return downstream.Update{Status: downstream.Status(is.State), Labels: &labels, Assignee: &assignee}
	}
}

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		f := githubtest.New(t, "acme", "support", token)
		return downstreamtest.UpdateHarness{
			Target:    newTarget(t, f.URL(), token),
			NewTicket: func() string { return strconv.FormatInt(f.AddIssue("Printer on fire", "bug"), 10) },
			Read:      readIssue(t, f),
			Sample:    downstream.Update{Status: downstream.StatusClosed, Labels: &[]string{"wontfix", "hardware"}, Assignee: new("octocat")},
			Missing:   "4242",
			BadRefs:   []string{"abc", "acme/other#1"},
		}
	})
}

func TestParseTicket(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	for _, ref := range []string{"17", "#17", "acme/support#17", "ACME/Support#17", f.URL() + "/acme/support/issues/17",
		f.URL() + "/repos/acme/support/issues/17"} {
		r, err := tg.ParseTicket(ref)
		if err != nil || r.ExternalID != "17" || r.URL != f.URL()+"/acme/support/issues/17" {
			t.Errorf("ParseTicket(%q) = %+v, %v; want issue 17", ref, r, err)
		}
	}
	public, err := github.New(github.Config{Name: "gh", Owner: "acme", Repo: "support", Token: downstream.NewSecret(token)})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := public.ParseTicket("https://github.com/acme/support/issues/3"); err != nil || r.URL != "https://github.com/acme/support/issues/3" {
		t.Fatalf("a github.com issue URL: %+v, %v", r, err)
	}
}

// A created issue's receipt is a reference: the comment lands on it, and
// an update keeps the key label Find needs.
func TestUpdateKeepsTheKeyLabel(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	d := downstreamtest.NewDelivery("req-filed")
	r := deliver(t, tg, d)
	ctx := context.Background()
	if _, err := tg.AddComment(ctx, downstreamtest.NewComment("c-on-receipt", r.URL)); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Update(ctx, downstream.UpdateDelivery{Key: "u", Attempt: 1, Ticket: r.ExternalID,
		Set: downstream.Update{Labels: &[]string{}}}); err != nil {
		t.Fatal(err)
	}
	is, _ := f.Issue(downstreamtest.ID(t, r.ExternalID))
	if !slices.Equal(is.Labels, []string{github.KeyLabel(d.Key)}) || len(is.Comments) != 1 {
		t.Fatalf("issue %+v: want the key label alone and one comment", is)
	}
	if got, ok, err := tg.Find(ctx, d); err != nil || !ok || got.ExternalID != r.ExternalID {
		t.Fatalf("Find after clearing the labels = %+v, %v, %v", got, ok, err)
	}
}

// Without push access GitHub drops label and assignee changes silently:
// the update fails, saying why.
func TestUpdateDroppedWithoutPush(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.PushAccess = false
	tg := newTarget(t, f.URL(), token)
	ref := strconv.FormatInt(f.AddIssue("Printer on fire"), 10)
	_, err := tg.Update(context.Background(), downstream.UpdateDelivery{Key: "u", Attempt: 1, Ticket: ref,
		Set: downstream.Update{Labels: &[]string{"bug"}}})
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "push") {
		t.Fatalf("labels dropped by GitHub: %v; want a permanent error naming push access", err)
	}
}

// A locked conversation refuses comments (403): not retried, and the
// error carries GitHub's message.
func TestCommentOnLockedIssue(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	n := f.AddIssue("Printer on fire")
	f.Lock(n)
	_, err := tg.AddComment(context.Background(), downstreamtest.NewComment("c-locked", strconv.FormatInt(n, 10)))
	if e := downstream.Classify(err); err == nil || e.Class == downstream.Transient || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("a comment on a locked issue: %v; want an error that is not retried, with GitHub's message", err)
	}
}
