// Package pagerduty triggers PagerDuty alerts through the Events API v2
// (POST /v2/enqueue → 202). The dedupe key is the event's dedup_key: while
// the alert it opened is open, a resend with the same key applies to that
// alert instead of opening another.
package pagerduty

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"ticketrelay/downstream"
	"ticketrelay/downstream/internal/rest"
)

// DefaultBaseURL is the Events API host.
const DefaultBaseURL = "https://events.pagerduty.com"

// Capabilities: keyed by dedup_key for as long as the alert stays open
// (Window 0: PagerDuty sets no time limit). No lookup with the routing key
// alone (the REST API needs another credential).
var Capabilities = downstream.Capabilities{DedupeKey: true}

// Config configures one PagerDuty target.
type Config struct {
	Name string
	// BaseURL of the Events API (default DefaultBaseURL).
	BaseURL string
	// RoutingKey is the 32-character integration key of an Events API v2
	// integration on a service.
	RoutingKey downstream.Secret
	// Source is the event's payload.source (default "ticketrelay").
	Source string
	// HTTP is the client (nil: a client with a 20s timeout).
	HTTP *http.Client
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Target triggers alerts.
type Target struct {
	cfg  Config
	base string
	c    *rest.Client
}

var _ downstream.Target = (*Target)(nil)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	base, err := rest.BaseURL("pagerduty", cfg.Name, cfg.BaseURL, "")
	if err != nil {
		return nil, err
	}
	if cfg.RoutingKey.IsZero() {
		return nil, fmt.Errorf("pagerduty %q: a routing key is required", cfg.Name)
	}
	if cfg.Source == "" {
		cfg.Source = "ticketrelay"
	}
	return &Target{cfg: cfg, base: base, c: rest.NewClient(cfg.HTTP, cfg.Now)}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// Severity maps a ticket priority to a PagerDuty severity.
func Severity(priority string) string {
	switch priority {
	case "urgent":
		return "critical"
	case "high":
		return "error"
	case "low":
		return "info"
	}
	return "warning"
}

// Event is the body of POST /v2/enqueue.
type Event struct {
	RoutingKey  string  `json:"routing_key"`
	EventAction string  `json:"event_action"`
	DedupKey    string  `json:"dedup_key,omitempty"`
	Client      string  `json:"client,omitempty"`
	Payload     Payload `json:"payload"`
}

// Payload is the event's payload.
type Payload struct {
	Summary       string         `json:"summary"`
	Source        string         `json:"source"`
	Severity      string         `json:"severity"`
	Timestamp     string         `json:"timestamp,omitempty"`
	CustomDetails map[string]any `json:"custom_details,omitempty"`
}

// Deliver triggers the alert.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	ev := Event{
		RoutingKey: t.cfg.RoutingKey.Reveal(), EventAction: "trigger", DedupKey: d.Key, Client: "ticketrelay",
		Payload: Payload{
			Summary: d.Ticket.Title, Source: t.cfg.Source, Severity: Severity(d.Ticket.Priority),
			Timestamp: d.Ticket.CreatedAt.UTC().Format(time.RFC3339),
			CustomDetails: map[string]any{
				"body": d.Ticket.Body, "labels": d.Ticket.Labels, "ticket_id": d.Ticket.ID, "request_id": d.Ticket.RequestID,
			},
		},
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.base+"/v2/enqueue", ev)
	if err != nil {
		return downstream.Receipt{}, err
	}
	resp, err := t.c.Do(req)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var ans struct {
		Status   string   `json:"status"`
		Message  string   `json:"message"`
		DedupKey string   `json:"dedup_key"`
		Errors   []string `json:"errors"`
	}
	_ = resp.JSON(&ans)
	if !resp.OK() {
		msg := rest.Message(resp)
		if ans.Message != "" {
			msg = ans.Message
			if len(ans.Errors) > 0 {
				msg += ": " + strings.Join(ans.Errors, "; ")
			}
		}
		e := t.c.Fail(resp, msg)
		if resp.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(strings.ReplaceAll(msg, "_", " ")), "routing key") {
			// The routing key is the credential: a wrong one is an auth error.
			e.Class = downstream.Auth
		}
		return downstream.Receipt{}, e
	}
	if ans.DedupKey == "" {
		ans.DedupKey = d.Key
	}
	return downstream.Receipt{ExternalID: ans.DedupKey}, nil
}
