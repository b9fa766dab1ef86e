package github_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/downstream"
	"ticketrelay/downstream/downstreamtest"
	"ticketrelay/downstream/github"
	"ticketrelay/downstream/github/githubtest"
)

const token = "ghp_test"

func newTarget(t *testing.T, base, tok string) *github.Target {
	t.Helper()
	tg, err := github.New(github.Config{Name: "gh", BaseURL: base, Owner: "acme", Repo: "support", Token: downstream.NewSecret(tok)})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestConformance(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		f := githubtest.New(t, "acme", "support", token)
		return downstreamtest.Harness{
			Target:         newTarget(t, f.URL(), token),
			Faults:         &f.Faults,
			Count:          f.Count,
			BadAuth:        newTarget(t, f.URL(), "expired"),
			Unreachable:    newTarget(t, "http://"+downstreamtest.ClosedAddr(t), token),
			Invalid:        func(d *downstream.Delivery) { d.Ticket.Title = "" },
			InvalidMessage: "Validation Failed; Issue.title: missing_field",
		}
	})
}

func TestIssueCarriesKeyLabel(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	d := downstreamtest.NewDelivery("req-label")
	r, err := newTarget(t, f.URL(), token).Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	is := f.Issues()[0]
	if !slices.Contains(is.Labels, github.KeyLabel(d.Key)) || !slices.Contains(is.Labels, "facilities") || is.Title != d.Ticket.Title {
		t.Fatalf("issue %+v lacks the key label or the ticket's labels", is)
	}
	if r.ExternalID != "1" || r.URL == "" {
		t.Fatalf("receipt %+v", r)
	}
	if l := github.KeyLabel(strings.Repeat("k", 255)); len(l) > 50 {
		t.Fatalf("KeyLabel is %d characters; GitHub allows 50", len(l))
	}
}

// The issues list includes pull requests; Find must not take one for the issue.
func TestFindSkipsPullRequests(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	d := downstreamtest.NewDelivery("req-pr")
	f.AddPullRequest("a PR that reuses the label", github.KeyLabel(d.Key))
	if _, found, err := tg.Find(context.Background(), d); err != nil || found {
		t.Fatalf("Find = found %v, %v; want not found", found, err)
	}
}

func TestRateLimitsAreTransient(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	f.LimitNext(githubtest.Primary)
	_, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-primary"))
	e := downstream.Classify(err)
	if e.Class != downstream.Transient || e.MayHaveActed || e.StatusCode != 403 || e.RetryAfter < 30*time.Second || e.RetryAfter > 43*time.Second {
		t.Fatalf("primary limit: %s, retry after %v (%v); want transient, ~42s from x-ratelimit-reset", e.Class, e.RetryAfter, err)
	}
	f.LimitNext(githubtest.Secondary)
	_, err = tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-secondary"))
	e = downstream.Classify(err)
	if e.Class != downstream.Transient || e.MayHaveActed || e.RetryAfter != 61*time.Second {
		t.Fatalf("secondary limit: %s, retry after %v (%v); want transient, 61s from retry-after", e.Class, e.RetryAfter, err)
	}
	if f.Count() != 0 {
		t.Fatalf("%d issues, want 0", f.Count())
	}
}

// Without push access GitHub drops the labels silently: the issue exists but
// Find cannot see it. This is why the token needs push (triage) access.
func TestLabelsDroppedWithoutPushAccess(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.PushAccess = false
	tg := newTarget(t, f.URL(), token)
	d := downstreamtest.NewDelivery("req-nopush")
	if _, err := tg.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := tg.Find(context.Background(), d); found {
		t.Fatal("Find saw an issue whose labels were dropped")
	}
}
