package pagerduty_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/pagerduty"
	"ticketrelay/delivery/downstream/pagerduty/pagerdutytest"
)

func newRESTTarget(t *testing.T, f *pagerdutytest.Fake, token string, now func() time.Time) *pagerduty.Target {
	t.Helper()
	tg, err := pagerduty.New(pagerduty.Config{Name: "oncall", BaseURL: f.URL(), RoutingKey: downstream.NewSecret(routingKey),
		APIToken: downstream.NewSecret(token), APIBaseURL: f.APIURL(), From: "bot@acme.test", WebURL: pagerdutytest.WebURL,
		PriorityIDs: map[string]string{"low": "PPRIO04", "normal": "PPRIO03", "high": "PPRIO02", "urgent": "PPRIO01"},
		HTTPConfig:  downstream.HTTPConfig{Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken})
		return downstreamtest.CommentHarness{
			Target:    newRESTTarget(t, f, apiToken, nil),
			Faults:    &f.NoteFaults,
			NewTicket: func() string { return f.AddIncident("Checkout returns 500") },
			Comments: func(ref string) []string {
				a, _ := f.Incident(ref)
				var out []string
				for _, n := range a.Notes {
					out = append(out, n.Content)
				}
				return out
			},
			Seed: func(ref string, n int) { f.AddNotes(ref, n) },
			// PagerDuty lists every note in one answer.
			PageSize: 25,
			Missing:  "QMISSING",
			BadRefs: []string{"https://example.com/incidents/Q000001", pagerdutytest.WebURL + "/services/PSERVIC", "two words",
				pagerdutytest.WebURL + "/incidents/lower"},
			BadAuth: newRESTTarget(t, f, "revoked-token-000000", nil),
		}
	})
}

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken})
		return downstreamtest.UpdateHarness{
			Target:    newRESTTarget(t, f, apiToken, nil),
			NewTicket: func() string { return f.AddIncident("Checkout returns 500") },
			Read: func(ref string) downstream.Update {
				a, _ := f.Incident(ref)
				u := downstream.Update{Status: downstream.StatusOpen, Assignee: new(strings.Join(a.Assignees, ","))}
				if a.Status == "resolved" {
					u.Status = downstream.StatusClosed
				}
				u.Priority = map[string]string{"PPRIO04": "low", "PPRIO03": "normal", "PPRIO02": "high", "PPRIO01": "urgent"}[a.Priority]
				return u
			},
			Sample:   downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Assignee: new("PUSER02")},
			Missing:  "QMISSING",
			BadRefs:  []string{"https://example.com/incidents/Q000001", "two words"},
			NoReopen: true,
		}
	})
}

// A trigger's receipt names the alert by its dedup_key: a comment on it
// finds the incident by incident_key once the incident has appeared, and
// waits (transient) until then. A resolved incident is not reopened.
func TestCommentOnTriggeredAlert(t *testing.T) {
	clock := downstreamtest.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	f := pagerdutytest.New(t, routingKey, pagerdutytest.Options{APIToken: apiToken, Now: clock.Now, IncidentLag: 5 * time.Second})
	tg := newRESTTarget(t, f, apiToken, clock.Now)
	ctx := context.Background()
	r, err := tg.Deliver(ctx, downstreamtest.NewDelivery("req-alert"))
	if err != nil {
		t.Fatal(err)
	}
	c := downstreamtest.NewComment("c-alert", r.ExternalID)
	_, err = tg.AddComment(ctx, c)
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Transient || e.MayHaveActed {
		t.Fatalf("a comment before the incident appeared: %v; want transient, not acted", err)
	}
	clock.Add(6 * time.Second)
	if _, err := tg.AddComment(ctx, c); err != nil {
		t.Fatal(err)
	}
	a := f.Alerts()[0]
	if len(a.Notes) != 1 || !strings.HasSuffix(a.Notes[0].Content, downstream.Marker(c.Key)) {
		t.Fatalf("notes %+v; want one ending with the marker", a.Notes)
	}
	if _, err := tg.Update(ctx, downstream.UpdateDelivery{Key: "u1", Attempt: 1, Ticket: r.ExternalID, Set: downstream.Update{Status: downstream.StatusClosed}}); err != nil {
		t.Fatal(err)
	}
	_, err = tg.Update(ctx, downstream.UpdateDelivery{Key: "u2", Attempt: 1, Ticket: a.IncidentID, Set: downstream.Update{Status: downstream.StatusOpen}})
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "reopens no incident") {
		t.Fatalf("reopening a resolved incident: %v; want a permanent error", err)
	}
}

// Without a REST API key and a From address the target neither comments
// nor updates, and says so before any call.
func TestNoRESTNoComments(t *testing.T) {
	f := pagerdutytest.New(t, routingKey)
	tg := newTarget(t, f.URL(), routingKey)
	if caps := tg.CommentCapabilities(); caps != (downstream.Capabilities{}) || len(tg.UpdateFields()) != 0 {
		t.Fatalf("without a REST API key: comment capabilities %+v, update fields %v; want none", caps, tg.UpdateFields())
	}
	_, err := tg.AddComment(context.Background(), downstreamtest.NewComment("c", "Q000001"))
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Permanent || !strings.Contains(err.Error(), "api_token") {
		t.Fatalf("AddComment without a REST API key: %v", err)
	}
}
