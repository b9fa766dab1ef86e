package jira_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/jira/jiratest"
)

const email, token = "bot@acme.test", "atl-token"

func newTarget(t *testing.T, base, tok string, now func() time.Time) *jira.Target {
	t.Helper()
	tg, err := jira.New(jira.Config{Name: "ops", BaseURL: base, Email: email, Token: downstream.NewSecret(tok), Project: "OPS", HTTPConfig: downstream.HTTPConfig{Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestConformance(t *testing.T) {
	downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
		f := jiratest.New(t, email, token, "OPS", 5*time.Second, nil)
		return downstreamtest.Harness{
			Target:         newTarget(t, f.URL(), token, nil),
			Faults:         &f.Faults,
			Count:          f.Count,
			BadAuth:        newTarget(t, f.URL(), "revoked", nil),
			Unreachable:    newTarget(t, "http://"+downstreamtest.ClosedAddr(t), token, nil),
			Invalid:        func(d *downstream.Delivery) { d.Ticket.Title = "" },
			InvalidMessage: "summary: You must specify a summary of the issue.",
		}
	})
}

// The search lags: right after a create Find says "not found" although the
// issue exists — which is why the target must declare an eventual lookup.
func TestSearchLagsBehindCreate(t *testing.T) {
	clock := downstreamtest.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	f := jiratest.New(t, email, token, "OPS", 30*time.Second, clock.Now)
	tg := newTarget(t, f.URL(), token, clock.Now)
	d := downstreamtest.NewDelivery("req-lag")
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := tg.Find(context.Background(), d); err != nil || found {
		t.Fatalf("Find right after create = %v, %v; the fake's search should lag", found, err)
	}
	clock.Add(31 * time.Second)
	got, found, err := tg.Find(context.Background(), d)
	if err != nil || !found || got != r {
		t.Fatalf("Find after the lag = %+v, %v, %v; want %+v", got, found, err, r)
	}
	if c := tg.Capabilities(); c.Lookup != downstream.LookupEventual || c.DedupeKey {
		t.Fatalf("capabilities %+v: want no key and an eventual lookup", c)
	}
}

func TestIssueShape(t *testing.T) {
	f := jiratest.New(t, email, token, "OPS", 0, nil)
	d := downstreamtest.NewDelivery("req-shape")
	d.Ticket.Labels = []string{"two words"}
	d.Ticket.Title = strings.Repeat("é", 300)
	r, err := newTarget(t, f.URL(), token, nil).Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	is := f.Issues()[0]
	if !slices.Contains(is.Labels, jira.KeyLabel(d.Key)) || !slices.Contains(is.Labels, "two_words") {
		t.Fatalf("labels %q: want the key label and spaces replaced", is.Labels)
	}
	if n := len([]rune(is.Summary)); n != jira.MaxSummary || is.Type != "Task" || is.Project != "OPS" {
		t.Fatalf("issue %q (%d chars) %s in %s", is.Summary, n, is.Type, is.Project)
	}
	if r.ExternalID != "OPS-1" || r.URL != f.URL()+"/browse/OPS-1" {
		t.Fatalf("receipt %+v", r)
	}
}

func TestADF(t *testing.T) {
	doc := jira.ADF("one\ntwo\n\n\n\nthree")
	paras := doc["content"].([]any)
	if doc["type"] != "doc" || len(paras) != 2 {
		t.Fatalf("ADF = %v; want a doc with two paragraphs", doc)
	}
	first := paras[0].(map[string]any)["content"].([]any)
	if len(first) != 3 || first[1].(map[string]string)["type"] != "hardBreak" {
		t.Fatalf("first paragraph %v: want text, hardBreak, text", first)
	}
}
