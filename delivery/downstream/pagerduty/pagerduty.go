// Package pagerduty triggers PagerDuty alerts through the Events API v2
// (POST /v2/enqueue → 202). The dedupe key is the event's dedup_key: while
// the alert it opened is open, a resend with the same key applies to that
// alert instead of opening another.
//
// Only while it is open. PagerDuty's developer documentation (Events API
// v2, trigger events: developer.pagerduty.com/docs/events-api-v2/trigger-events):
// "Submitting subsequent events for the same dedup_key will result in
// those events being applied to an open alert matching that dedup_key.
// Once the alert is resolved, any further events with the same dedup_key
// will create a new alert (for trigger events) or be dropped (for
// acknowledge and resolve events)." A resend
// that comes after someone resolved the alert (a lost answer retried
// later, a dispatcher that crashed after the call, a redrive hours later)
// would page again. With a REST API key (Config.APIToken) such a late
// call first looks the incident up by its incident_key (the dedup_key) and
// answers the incident it finds, whatever its status, instead of
// triggering; see Deliver. Without one, that case pages twice.
package pagerduty

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/ticket"
)

// DefaultBaseURL is the Events API host.
const DefaultBaseURL = "https://events.pagerduty.com"

// DefaultAPIURL is the REST API host, where incidents are looked up.
const DefaultAPIURL = "https://api.pagerduty.com"

// LookupAfter: a delivery of a ticket accepted at least this long ago looks
// its incident up before triggering (with a REST API key). Before that, a
// lookup proves nothing and the dedup_key covers the resend:
//   - the Events API is asynchronous: the 202 says the event was queued, and
//     the incident appears in the REST API some seconds later. A lookup right
//     after an answer was lost can miss an incident that is being created;
//     the resend's trigger then applies to the alert the first one opens.
//   - while the alert is open (and one that was triggered a minute ago is
//     still open unless someone resolved it within that minute), the
//     dedup_key alone keeps the resend from opening a second one.
//
// Two minutes is far beyond the seconds the incident takes to appear, and
// short enough that a retry after a lost answer, a dispatcher restart and
// every redrive come after it. A ticket accepted this long ago may have
// been sent before on any attempt (a redrive starts counting again; a
// dispatcher killed after the call recorded nothing), so the attempt
// number is not consulted.
const LookupAfter = 2 * time.Minute

// Capabilities: keyed by dedup_key for as long as the alert stays open
// (Window 0: PagerDuty sets no time limit). Lookup is LookupNone: it is
// declared per kind, with no secret read, and the routing key alone finds
// nothing. With a REST API key the target also has a lookup (Find), which
// is eventual (an incident appears seconds after the 202), so it could
// never prove an item absent; the forwarder consults Lookup only for
// targets without a dedupe key, and resends this one with its key.
var Capabilities = downstream.Capabilities{DedupeKey: true}

// Config configures one PagerDuty target.
type Config struct {
	Name string
	// BaseURL of the Events API (default DefaultBaseURL).
	BaseURL string
	// RoutingKey is the 32-character integration key of an Events API v2
	// integration on a service.
	RoutingKey downstream.Secret
	// APIToken is an optional REST API key (a read-only account key, or a
	// user key that sees the service's incidents). With it, a late delivery
	// looks the incident up before triggering (see Deliver). Without it, a
	// resend after the alert was resolved opens a new alert.
	APIToken downstream.Secret
	// APIBaseURL of the REST API (default DefaultAPIURL). Only with APIToken.
	APIBaseURL string
	// Source is the event's payload.source (default "ticketrelay").
	Source string
	// From is the email of the PagerDuty user notes and updates are made
	// as (the REST API's From header). Notes and updates need it and
	// APIToken.
	From string
	// WebURL is the account's web address (https://SUBDOMAIN.pagerduty.com):
	// incident pages under it are references to incidents ("": any host
	// under pagerduty.com).
	WebURL string
	// PriorityIDs maps ticket priorities to the ids of the account's
	// incident priorities (P1…P5 are the account's own, with ids of their
	// own); without it an update sets no priority.
	PriorityIDs map[string]string
	downstream.HTTPConfig
}

// Target triggers alerts.
type Target struct {
	cfg     Config
	apiBase string // "" without an API token
	api     rest.API
}

var (
	_ downstream.Target = (*Target)(nil)
	_ downstream.Finder = (*Target)(nil)
)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	api, err := rest.NewAPI("pagerduty", cfg.Name, cfg.BaseURL, "", cfg.HTTPConfig, cfg.RoutingKey, cfg.APIToken)
	if err != nil {
		return nil, err
	}
	if cfg.RoutingKey.IsZero() {
		return nil, fmt.Errorf("pagerduty %q: a routing key is required", cfg.Name)
	}
	var apiBase string
	switch {
	case !cfg.APIToken.IsZero():
		if cfg.APIBaseURL == "" {
			cfg.APIBaseURL = DefaultAPIURL
		}
		if apiBase, err = rest.BaseURL("pagerduty", cfg.Name, cfg.APIBaseURL, DefaultAPIURL); err != nil {
			return nil, fmt.Errorf("%w (the REST API endpoint)", err)
		}
	case cfg.APIBaseURL != "":
		return nil, fmt.Errorf("pagerduty %q: a REST API endpoint without a REST API key: lookups need both", cfg.Name)
	}
	if cfg.From != "" && (cfg.APIToken.IsZero() || !strings.Contains(cfg.From, "@")) {
		return nil, fmt.Errorf("pagerduty %q: from %q: want the email of a PagerDuty user, with a REST API key", cfg.Name, cfg.From)
	}
	if cfg.WebURL != "" {
		if _, err := rest.BaseURL("pagerduty", cfg.Name, cfg.WebURL, "https://acme.pagerduty.com"); err != nil {
			return nil, fmt.Errorf("%w (the web address)", err)
		}
	}
	for p, id := range cfg.PriorityIDs {
		if !slices.Contains(ticket.Priorities, p) || strings.TrimSpace(id) == "" {
			return nil, fmt.Errorf("pagerduty %q: priority_ids maps %q to %q; want one of %s mapped to a priority id",
				cfg.Name, p, id, strings.Join(ticket.Priorities, ", "))
		}
	}
	if cfg.Source == "" {
		cfg.Source = "ticketrelay"
	}
	return &Target{cfg: cfg, api: api, apiBase: apiBase}, nil
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
	Component     string         `json:"component,omitempty"`
	Group         string         `json:"group,omitempty"`
	Class         string         `json:"class,omitempty"`
	CustomDetails map[string]any `json:"custom_details,omitempty"`
}

// Deliver triggers the alert. With a REST API key, a delivery of a ticket
// accepted LookupAfter ago or more first looks the incident up by its
// incident_key: found (open or resolved), its receipt is the answer and
// nothing is triggered; not found, the alert is triggered. A failed lookup
// is the delivery's error (transient for a 5xx, a 429 or a network error;
// it never acted): triggering blind could page twice.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	if t.apiBase != "" && t.api.Now().Sub(d.Ticket.CreatedAt) >= LookupAfter {
		r, found, err := t.Find(ctx, d)
		if err != nil {
			return downstream.Receipt{}, err
		}
		if found {
			return r, nil
		}
	}
	return t.trigger(ctx, d)
}

func (t *Target) trigger(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
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
	payloadFields(&ev.Payload, d.Ticket.TargetFields())
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.api.Base+"/v2/enqueue", ev)
	if err != nil {
		return downstream.Receipt{}, err
	}
	resp, err := t.api.Do(req)
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
		e := t.api.Fail(resp, msg)
		if resp.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(strings.ReplaceAll(msg, "_", " ")), "routing key") {
			// The routing key is the credential: a wrong one is an auth error.
			e.Class = downstream.Auth
		}
		return downstream.Receipt{}, e
	}
	if ans.DedupKey == "" {
		ans.DedupKey = d.Key
	}
	// The Events API answers no incident: the receipt names the alert by
	// its dedup_key (a lookup that finds the incident names the incident).
	return downstream.Receipt{ExternalID: ans.DedupKey}, nil
}

// incidentJSON is the part of a REST API incident the lookup reads.
type incidentJSON struct {
	ID          string `json:"id"`
	HTMLURL     string `json:"html_url"`
	Status      string `json:"status"`
	IncidentKey string `json:"incident_key"`
	CreatedAt   string `json:"created_at"`
}

// Find lists the incidents whose incident_key is the delivery's key
// (GET /incidents?incident_key=…) and answers the oldest: the one the first
// trigger with the key opened. Every status is asked for (a resolved
// incident is exactly the case the lookup is for) and date_range=all drops
// the list's default window of the last month (a redrive may come later).
// It needs the REST API key; the lookup is eventual: an incident appears
// seconds after the Events API's 202, so "not found" proves nothing about
// a trigger sent moments ago.
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	if t.apiBase == "" {
		return downstream.Receipt{}, false, &downstream.Error{Class: downstream.Permanent,
			Err: fmt.Errorf("pagerduty %q: no REST API key is configured: incidents cannot be looked up", t.cfg.Name)}
	}
	q := url.Values{}
	q.Set("incident_key", d.Key)
	q.Set("date_range", "all")
	for _, s := range []string{"triggered", "acknowledged", "resolved"} {
		q.Add("statuses[]", s)
	}
	q.Set("limit", "100")
	req, err := rest.NewRequest(ctx, http.MethodGet, t.apiBase+"/incidents?"+q.Encode(), nil)
	if err != nil {
		return downstream.Receipt{}, false, err
	}
	req.Header.Set("Accept", "application/vnd.pagerduty+json;version=2")
	req.Header.Set("Authorization", "Token token="+t.cfg.APIToken.Reveal())
	resp, err := t.api.Do(req)
	if err != nil {
		return downstream.Receipt{}, false, lookupError(err)
	}
	if !resp.OK() {
		return downstream.Receipt{}, false, lookupError(t.api.Fail(resp, restMessage(resp)))
	}
	var ans struct {
		Incidents []incidentJSON `json:"incidents"`
	}
	if err := resp.Result(&ans); err != nil {
		return downstream.Receipt{}, false, lookupError(err)
	}
	var first *incidentJSON
	var firstAt time.Time
	for i := range ans.Incidents {
		in := &ans.Incidents[i]
		// An incident that took our alert in by grouping has no incident_key
		// of its own; the API lists it because its alert carries the key.
		if in.ID == "" || (in.IncidentKey != "" && in.IncidentKey != d.Key) {
			continue
		}
		at, _ := time.Parse(time.RFC3339, in.CreatedAt)
		if first == nil || (!at.IsZero() && (firstAt.IsZero() || at.Before(firstAt))) {
			first, firstAt = in, at
		}
	}
	if first == nil {
		return downstream.Receipt{}, false, nil
	}
	return downstream.Receipt{ExternalID: first.ID, URL: first.HTMLURL}, true, nil
}

// lookupError says the failed call was the lookup.
func lookupError(err error) *downstream.Error {
	e := *downstream.Classify(err)
	e.Err = fmt.Errorf("looking up the incident: %w", e.Err)
	return &e
}

// restMessage renders the REST API's error body: {"error": {"message":
// "...", "code": 2006, "errors": ["..."]}}.
func restMessage(r *rest.Response) string {
	var b struct {
		Error struct {
			Message string   `json:"message"`
			Code    int      `json:"code"`
			Errors  []string `json:"errors"`
		} `json:"error"`
	}
	if json.Unmarshal(r.Body, &b) != nil || b.Error.Message == "" {
		return rest.Message(r)
	}
	msg := b.Error.Message
	if b.Error.Code != 0 {
		msg = fmt.Sprintf("%s (code %d)", msg, b.Error.Code)
	}
	if len(b.Error.Errors) > 0 {
		msg += ": " + strings.Join(b.Error.Errors, "; ")
	}
	return msg
}
