package github_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/github"
	"ticketrelay/delivery/downstream/github/githubtest"
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

func deliver(t *testing.T, tg *github.Target, d downstream.Delivery) downstream.Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := tg.Deliver(ctx, d)
	if err != nil {
		t.Fatalf("Deliver %s: %v", d.Key, err)
	}
	return r
}

func deliverErr(t *testing.T, tg *github.Target, d downstream.Delivery) *downstream.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := tg.Deliver(ctx, d)
	if err == nil {
		t.Fatalf("Deliver %s succeeded (%+v); want an error", d.Key, r)
	}
	return downstream.Classify(err)
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
	r := deliver(t, newTarget(t, f.URL(), token), d)
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

// Every documented rate-limit answer is transient, created nothing, and
// waits as long as GitHub asks: retry-after, else x-ratelimit-reset when
// x-ratelimit-remaining is 0, else at least a minute.
func TestRateLimitsAreTransient(t *testing.T) {
	for _, c := range []struct {
		name       string
		limit      githubtest.Limit
		status     int           // the fake's LimitStatus
		retryAfter time.Duration // the fake's retry-after (0: none)
		wantStatus int
		min, max   time.Duration
	}{
		{"primary 403", githubtest.Primary, 403, 0, 403, 30 * time.Second, 43 * time.Second},
		{"primary 429", githubtest.Primary, 429, 0, 429, 30 * time.Second, 43 * time.Second},
		{"secondary with retry-after", githubtest.Secondary, 403, 61 * time.Second, 403, 61 * time.Second, 61 * time.Second},
		{"secondary 403 without retry-after", githubtest.Secondary, 403, 0, 403, time.Minute, time.Minute},
		{"secondary 429 without retry-after", githubtest.Secondary, 429, 0, 429, time.Minute, time.Minute},
		{"abuse detection without retry-after", githubtest.Abuse, 403, 0, 403, time.Minute, time.Minute},
		{"abuse detection with retry-after", githubtest.Abuse, 403, 90 * time.Second, 403, 90 * time.Second, 90 * time.Second},
		{"422 submitted too quickly", githubtest.TooQuickly, 403, 0, 422, time.Minute, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := githubtest.New(t, "acme", "support", token)
			f.LimitStatus, f.RetryAfter = c.status, c.retryAfter
			tg := newTarget(t, f.URL(), token)
			f.LimitNext(c.limit)
			e := deliverErr(t, tg, downstreamtest.NewDelivery("req-limited"))
			if e.Class != downstream.Transient || e.MayHaveActed || !e.Throttled || e.StatusCode != c.wantStatus || e.RetryAfter < c.min || e.RetryAfter > c.max {
				t.Fatalf("%s HTTP %d, may have acted %v, retry after %v (%v); want transient HTTP %d, not acted, retry after %v..%v",
					e.Class, e.StatusCode, e.MayHaveActed, e.RetryAfter, e, c.wantStatus, c.min, c.max)
			}
			if f.Count() != 0 {
				t.Fatalf("%d issues, want 0", f.Count())
			}
			deliver(t, tg, downstreamtest.NewDelivery("req-limited")) // the limit has passed
		})
	}
}

// Without push access GitHub drops the labels of a new issue silently, and
// Find could never see it: the target creates nothing and says why.
func TestNoPushAccessCreatesNothing(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.PushAccess = false
	tg := newTarget(t, f.URL(), token)
	d := downstreamtest.NewDelivery("req-nopush")
	e := deliverErr(t, tg, d)
	if e.Class != downstream.Permanent || e.MayHaveActed || !strings.Contains(e.Error(), "the token cannot set labels on acme/support") ||
		!strings.Contains(e.Error(), "push") {
		t.Fatalf("Deliver without push access: %s (may have acted %v): %v; want a permanent error naming the missing access",
			e.Class, e.MayHaveActed, e)
	}
	if f.Count() != 0 || f.Faults.Served() != 0 {
		t.Fatalf("%d issues, %d create requests; want none", f.Count(), f.Faults.Served())
	}
	// Not remembered: once the access is granted, deliveries go through.
	f.PushAccess = true
	deliver(t, tg, d)
	if f.RepoCalls() != 2 || f.Count() != 1 || !slices.Contains(f.Issues()[0].Labels, github.KeyLabel(d.Key)) {
		t.Fatalf("after the grant: %d access checks, issues %+v; want 2 checks and one labelled issue", f.RepoCalls(), f.Issues())
	}
}

// Triage access lets a user label existing issues; the create-an-issue
// documentation keeps labels on a new issue only for push access.
func TestTriageAccessIsNotEnough(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.PushAccess, f.Triage = false, true
	e := deliverErr(t, newTarget(t, f.URL(), token), downstreamtest.NewDelivery("req-triage"))
	if e.Class != downstream.Permanent || !strings.Contains(e.Error(), "only triage access") || f.Count() != 0 {
		t.Fatalf("Deliver with triage access: %v (%d issues); want a permanent error naming triage access, no issue", e, f.Count())
	}
}

// The access is checked once per target, before its first create, however
// many deliveries start together.
func TestAccessCheckedOnce(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := tg.Deliver(ctx, downstreamtest.NewDelivery("req-once-"+string(rune('a'+i))))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	deliver(t, tg, downstreamtest.NewDelivery("req-once-later"))
	if f.RepoCalls() != 1 || f.Count() != 9 {
		t.Fatalf("%d access checks for %d issues; want 1 for 9", f.RepoCalls(), f.Count())
	}
}

// A check that failed for a passing reason is made again by the next
// delivery; the failed one created nothing and says so.
func TestAccessCheckRetriedAfterTransientFailure(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	d := downstreamtest.NewDelivery("req-check-500")
	f.RepoFaults.Next(downstreamtest.ServerError)
	e := deliverErr(t, tg, d)
	if e.Class != downstream.Transient || e.MayHaveActed || f.Faults.Served() != 0 {
		t.Fatalf("check answered 500: %s (may have acted %v, %d creates): %v; want transient, not acted, no create",
			e.Class, e.MayHaveActed, f.Faults.Served(), e)
	}
	deliver(t, tg, d)
	deliver(t, tg, downstreamtest.NewDelivery("req-check-after"))
	if f.RepoCalls() != 2 || f.Count() != 2 {
		t.Fatalf("%d access checks, %d issues; want 2 and 2", f.RepoCalls(), f.Count())
	}
}

// A GitHub App installation token gets no repository permissions from
// GitHub; it is recognised as an installation and may create.
func TestInstallationToken(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.Installation = true
	tg := newTarget(t, f.URL(), token)
	d := downstreamtest.NewDelivery("req-installation")
	deliver(t, tg, d)
	if _, found, err := tg.Find(context.Background(), d); err != nil || !found {
		t.Fatalf("Find after an installation's create = %v, %v", found, err)
	}
}

// Should GitHub drop the labels all the same, the issue is delivered (it
// exists), and the target creates nothing more: a later lost answer would
// become a duplicate.
func TestDroppedLabelsStopTheTarget(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.Installation, f.PushAccess = true, false // the check passes; the labels are dropped
	tg := newTarget(t, f.URL(), token)
	if r := deliver(t, tg, downstreamtest.NewDelivery("req-dropped")); r.ExternalID != "1" {
		t.Fatalf("receipt %+v, want issue 1", r)
	}
	e := deliverErr(t, tg, downstreamtest.NewDelivery("req-after-drop"))
	if e.Class != downstream.Permanent || e.MayHaveActed || !strings.Contains(e.Error(), "dropped the labels of issue #1") {
		t.Fatalf("after dropped labels: %v; want a permanent error naming issue #1", e)
	}
	if f.Count() != 1 || f.Faults.Served() != 1 {
		t.Fatalf("%d issues, %d creates; want 1 and 1", f.Count(), f.Faults.Served())
	}
}

// GitHub takes titles of at most 256 characters; ticketrelay 512.
func TestLongTitle(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	long := strings.Repeat("é", 300) + strings.Repeat("x", 212)
	d := downstreamtest.NewDelivery("req-long-title")
	d.Ticket.Title = long
	deliver(t, tg, d)
	exact := downstreamtest.NewDelivery("req-256")
	exact.Ticket.Title = strings.Repeat("ü", 256)
	deliver(t, tg, exact)

	is := f.Issues()
	if n := utf8.RuneCountInString(is[0].Title); n != github.MaxTitle || !strings.HasSuffix(is[0].Title, "…") ||
		!strings.HasPrefix(long, strings.TrimSuffix(is[0].Title, "…")) {
		t.Errorf("cut title of %d characters %.20q…; want the first 255 characters and an ellipsis", n, is[0].Title)
	}
	if !strings.HasPrefix(is[0].Body, long+"\n\n"+d.Ticket.Body) || !strings.Contains(is[0].Body, d.Ticket.ID) {
		t.Errorf("body %.40q does not start with the full title, then the ticket's body", is[0].Body)
	}
	if is[1].Title != exact.Ticket.Title || strings.HasPrefix(is[1].Body, exact.Ticket.Title) {
		t.Errorf("a title of 256 characters was changed (%q) or repeated in the body", is[1].Title)
	}
	if _, found, err := tg.Find(context.Background(), d); err != nil || !found {
		t.Fatalf("Find misses the issue with a cut title: %v, %v", found, err)
	}
}

// GitHub takes label names of at most 50 characters; ticketrelay 64.
func TestLongLabels(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	tg := newTarget(t, f.URL(), token)
	a, b := strings.Repeat("ü", 60)+"-a", strings.Repeat("ü", 60)+"-b" // the same first 50 characters
	d := downstreamtest.NewDelivery("req-long-labels")
	d.Ticket.Labels = []string{a, b, "short"}
	deliver(t, tg, d)

	is := f.Issues()[0]
	want := []string{github.KeyLabel(d.Key), github.Label(a), github.Label(b), "short"}
	if !slices.Equal(is.Labels, want) {
		t.Fatalf("labels %q, want %q", is.Labels, want)
	}
	for _, l := range []string{github.Label(a), github.Label(b)} {
		if n := utf8.RuneCountInString(l); n != github.MaxLabel || !strings.HasPrefix(l, strings.Repeat("ü", 41)+"-") {
			t.Errorf("shortened label %q has %d characters; want 41 of the label, '-' and 8 hex digits", l, n)
		}
	}
	la, lb := github.Label(a), github.Label(b)
	if la == lb || github.Label(a) != la || github.Label("short") != "short" {
		t.Errorf("Label is not deterministic and unique: %q %q", la, lb)
	}
	if !strings.Contains(is.Body, a) || !strings.Contains(is.Body, b) {
		t.Errorf("body %q does not keep the full labels", is.Body)
	}
}

// GitHub takes bodies of at most 65536 characters; ticketrelay 64 KiB, to
// which the footer (and a cut title) is added.
func TestLongBody(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	d := downstreamtest.NewDelivery("req-long-body")
	d.Ticket.Title = strings.Repeat("t", 512)
	d.Ticket.Body = strings.Repeat("b", 64*1024)
	deliver(t, newTarget(t, f.URL(), token), d)
	body := f.Issues()[0].Body
	if n := utf8.RuneCountInString(body); n > github.MaxBody || !strings.HasPrefix(body, d.Ticket.Title+"\n\nbbb") ||
		!strings.HasSuffix(body, "ticket "+d.Ticket.ID) {
		t.Fatalf("body of %d characters (%.20q … %q); want at most %d, the full title first and the footer last",
			n, body, body[max(len(body)-40, 0):], github.MaxBody)
	}
}

// A repository with issues turned off refuses every create with 410.
func TestIssuesDisabled(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	f.IssuesDisabled = true
	e := deliverErr(t, newTarget(t, f.URL(), token), downstreamtest.NewDelivery("req-disabled"))
	if e.Class != downstream.Permanent || e.StatusCode != 410 || !strings.Contains(e.Error(), "Issues are disabled for this repo") {
		t.Fatalf("issues disabled: %v; want permanent 410", e)
	}
}

// The fake refuses what GitHub refuses, in GitHub's shape.
func TestFakeEnforcesLimits(t *testing.T) {
	f := githubtest.New(t, "acme", "support", token)
	for _, c := range []struct {
		name string
		in   map[string]any
		want string
	}{
		{"title", map[string]any{"title": strings.Repeat("é", 257)}, "title is too long (maximum is 256 characters)"},
		{"body", map[string]any{"title": "t", "body": strings.Repeat("é", 65537)}, "body is too long (maximum is 65536 characters)"},
		{"label", map[string]any{"title": "t", "labels": []string{strings.Repeat("é", 51)}}, `"resource":"Label"`},
	} {
		b, _ := json.Marshal(c.in)
		req, _ := http.NewRequest(http.MethodPost, f.URL()+"/repos/acme/support/issues", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("User-Agent", "test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ans bytes.Buffer
		ans.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 422 || !strings.Contains(ans.String(), `"message":"Validation Failed"`) || !strings.Contains(ans.String(), c.want) {
			t.Errorf("%s over the limit: HTTP %d %s; want 422 Validation Failed with %s", c.name, resp.StatusCode, ans.String(), c.want)
		}
	}
	if f.Count() != 0 {
		t.Fatalf("%d issues, want 0", f.Count())
	}
}
