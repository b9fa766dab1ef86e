package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/delivery/downstream/webhook/webhooktest"
)

// newTicket files a ticket through tg and returns the id the receiver
// answered.
func newTicket(t *testing.T, tg *webhook.Target) func() string {
	var n atomic.Int32
	return func() string {
		r, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery(fmt.Sprintf("req-ticket-%d", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		return r.ExternalID
	}
}

// ownTransport is a target whose connections no other target shares: Go's
// transport resends a request carrying an Idempotency-Key by itself when a
// reused connection fails, which would hide the lost answer a test
// injects (and is safe: the receiver dedupes it).
func ownTransport(t *testing.T, f *webhooktest.Fake) *webhook.Target {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	tg, err := webhook.New(webhook.Config{Name: "hook", URL: f.URL(), SigningSecret: downstream.NewSecret(secret),
		Token: downstream.NewSecret("tok"), HTTPConfig: downstream.HTTPConfig{HTTP: &http.Client{Transport: tr}}})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestCommentConformance(t *testing.T) {
	downstreamtest.RunComments(t, func(t *testing.T) downstreamtest.CommentHarness {
		f := webhooktest.New(t, webhooktest.Options{SigningSecret: secret, Token: "tok"})
		return downstreamtest.CommentHarness{
			Target:    ownTransport(t, f),
			Faults:    &f.Faults,
			NewTicket: newTicket(t, newTarget(t, f, f.URL(), secret, "tok")),
			Comments: func(ref string) []string {
				var out []string
				for _, raw := range f.Events(webhook.CommentEventType, ref) {
					var c webhook.Comment
					if err := json.Unmarshal(raw, &c); err != nil {
						t.Fatal(err)
					}
					out = append(out, c.Body)
				}
				return out
			},
			Missing: "dlv_4242",
			BadRefs: []string{"two words", strings.Repeat("x", 256), "tab\there"},
			BadAuth: newTarget(t, f, f.URL(), "whsec_"+strings.Repeat("A", 32), "tok"),
		}
	})
}

func TestUpdateConformance(t *testing.T) {
	downstreamtest.RunUpdates(t, func(t *testing.T) downstreamtest.UpdateHarness {
		f := webhooktest.New(t, webhooktest.Options{SigningSecret: secret, Token: "tok"})
		tg := newTarget(t, f, f.URL(), secret, "tok")
		return downstreamtest.UpdateHarness{
			Target:    tg,
			NewTicket: newTicket(t, tg),
			// The receiver's view: every update applied in order.
			Read: func(ref string) downstream.Update {
				var cur downstream.Update
				for _, raw := range f.Events(webhook.UpdateEventType, ref) {
					var u webhook.Update
					if err := json.Unmarshal(raw, &u); err != nil {
						t.Fatal(err)
					}
					if u.Set.Status != "" {
						cur.Status = u.Set.Status
					}
					if u.Set.Priority != "" {
						cur.Priority = u.Set.Priority
					}
					if u.Set.Labels != nil {
						cur.Labels = u.Set.Labels
					}
					if u.Set.Assignee != nil {
						cur.Assignee = u.Set.Assignee
					}
				}
				return cur
			},
			Sample:  downstream.Update{Status: downstream.StatusClosed, Priority: "urgent", Labels: &[]string{"b", "a"}, Assignee: new("jane@acme.test")},
			Missing: "dlv_4242",
			BadRefs: []string{"two words"},
		}
	})
}
