// Package zendesk creates Zendesk Support tickets (POST /api/v2/tickets).
//
// Dedupe: the Idempotency-Key header, which Zendesk remembers for 2 hours
// per account (a replay answers the first ticket with
// "x-idempotency-lookup: hit"; the same key with another body is a 400
// IdempotentRequestError). The key is also stored as the ticket's
// external_id, so that a call that may come after the 2 hours, or that
// Zendesk refuses as a key reused with another body, lists tickets by
// external_id and finds the one an earlier call created.
package zendesk

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/ticket"
)

// Window is how long Zendesk remembers an Idempotency-Key.
const Window = 2 * time.Hour

// LookupMargin: a resend this close to the end of the Window looks the
// ticket up first (clock skew, a request in flight when the key expires).
const LookupMargin = 15 * time.Minute

// Capabilities: keyed for 2 hours; the external_id list is read from the
// ticket store, not the search index.
var Capabilities = downstream.Capabilities{DedupeKey: true, Window: Window, Lookup: downstream.LookupConsistent}

// Config configures one Zendesk target.
type Config struct {
	Name string
	// BaseURL is the account's address, e.g. https://acme.zendesk.com.
	BaseURL string
	// Email and Token authenticate with an API token ({email}/token:{token}).
	Email string
	Token downstream.Secret
	// PublicComments makes comments public replies, mailed to the
	// requester (default: internal notes, seen by agents only).
	PublicComments bool
	downstream.HTTPConfig
}

// Target creates Zendesk tickets.
type Target struct {
	cfg Config
	api rest.API
}

var (
	_ downstream.Target = (*Target)(nil)
	_ downstream.Finder = (*Target)(nil)
)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	api, err := rest.NewAPI("zendesk", cfg.Name, cfg.BaseURL, "https://acme.zendesk.com", cfg.HTTPConfig, cfg.Token)
	if err != nil {
		return nil, err
	}
	if cfg.Email == "" || cfg.Token.IsZero() {
		return nil, fmt.Errorf("zendesk %q: email and API token are required", cfg.Name)
	}
	return &Target{cfg: cfg, api: api}, nil
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

type comment struct {
	Body string `json:"body"`
}

type newTicket struct {
	Subject    string   `json:"subject"`
	Comment    comment  `json:"comment"`
	Priority   string   `json:"priority,omitempty"`
	Tags       []string `json:"tags,omitempty"`
	ExternalID string   `json:"external_id"`
	// Requester is who asked (the target's caller option field): Zendesk
	// finds the end user by email, or creates one with this name.
	Requester *requester `json:"requester,omitempty"`
	// A create tool's fields (TicketFields).
	GroupID      json.RawMessage  `json:"group_id,omitempty"`
	AssigneeID   json.RawMessage  `json:"assignee_id,omitempty"`
	BrandID      json.RawMessage  `json:"brand_id,omitempty"`
	TicketFormID json.RawMessage  `json:"ticket_form_id,omitempty"`
	Type         json.RawMessage  `json:"type,omitempty"`
	CustomFields []map[string]any `json:"custom_fields,omitempty"`
}

// requester is the documented requester object of a ticket created
// through the API.
type requester struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// requesterOf is the requester for caller c; nil, leaving the API token's
// user as the requester, for a caller without an email (downstream.Present
// gives such a caller a footer instead).
func requesterOf(c ticket.Caller) *requester {
	if c.Email == "" {
		return nil
	}
	return &requester{Name: cmp.Or(c.Name, c.Email), Email: c.Email}
}

type ticketJSON struct {
	ID         int64  `json:"id"`
	ExternalID string `json:"external_id"`
}

// Deliver creates the ticket. A call that may come after Zendesk forgot the
// key (the ticket was accepted more than Window-LookupMargin ago, and no call
// with the key can be older than that) lists tickets by external_id first.
// Whatever the attempt number says: a redrive starts counting again, and a
// dispatcher killed after a call to a keyed target has recorded nothing, so
// an earlier call may have created the ticket on any attempt.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	if t.api.Now().Sub(d.Ticket.CreatedAt) >= Window-LookupMargin {
		r, found, err := t.Find(ctx, d)
		if err != nil {
			return downstream.Receipt{}, err
		}
		if found {
			return r, nil
		}
	}
	body := d.Ticket.Body
	if strings.TrimSpace(body) == "" {
		body = d.Ticket.Title // Zendesk requires a first comment
	}
	tags := make([]string, 0, len(d.Ticket.Labels))
	for _, l := range d.Ticket.Labels {
		tags = append(tags, strings.ReplaceAll(l, " ", "_")) // a space splits a Zendesk tag
	}
	fields := d.Ticket.TargetFields()
	for _, tag := range downstream.FieldStrings(fields, "tags") {
		if tag = strings.ReplaceAll(tag, " ", "_"); !slices.Contains(tags, tag) {
			tags = append(tags, tag)
		}
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.api.Base+"/api/v2/tickets", map[string]newTicket{"ticket": {
		Subject: d.Ticket.Title, Comment: comment{Body: body}, Priority: d.Ticket.Priority, Tags: tags, ExternalID: d.Key,
		Requester: requesterOf(d.Ticket.Caller),
		GroupID:   fields["group_id"], AssigneeID: fields["assignee_id"], BrandID: fields["brand_id"],
		TicketFormID: fields["ticket_form_id"], Type: fields["type"], CustomFields: downstream.CustomFields(fields),
	}})
	if err != nil {
		return downstream.Receipt{}, err
	}
	req.Header.Set("Idempotency-Key", d.Key)
	var ans struct {
		Ticket ticketJSON `json:"ticket"`
	}
	if err := t.call(req, &ans); err != nil {
		if !isIdempotentRequestError(err) {
			return downstream.Receipt{}, err
		}
		// The key was used with another body (this build renders the
		// ticket differently from the one that sent it first): the first
		// call created the ticket, which carries the key as external_id.
		r, found, ferr := t.Find(ctx, d)
		if ferr != nil || !found {
			return downstream.Receipt{}, err
		}
		return r, nil
	}
	if ans.Ticket.ID == 0 {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Transient, MayHaveActed: true, Err: fmt.Errorf("zendesk answered without a ticket id")}
	}
	return t.receipt(ans.Ticket.ID), nil
}

// Find lists tickets whose external_id is the delivery's key.
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.api.Base+"/api/v2/tickets?external_id="+url.QueryEscape(d.Key), nil)
	if err != nil {
		return downstream.Receipt{}, false, err
	}
	var ans struct {
		Tickets []ticketJSON `json:"tickets"`
	}
	if err := t.call(req, &ans); err != nil {
		return downstream.Receipt{}, false, err
	}
	var first int64
	for _, tk := range ans.Tickets {
		if tk.ExternalID == d.Key && (first == 0 || tk.ID < first) {
			first = tk.ID
		}
	}
	if first == 0 {
		return downstream.Receipt{}, false, nil
	}
	return t.receipt(first), true, nil
}

func (t *Target) receipt(id int64) downstream.Receipt {
	s := strconv.FormatInt(id, 10)
	return downstream.Receipt{ExternalID: s, URL: t.api.Base + "/agent/tickets/" + s}
}

func (t *Target) call(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(t.cfg.Email+"/token:"+t.cfg.Token.Reveal())))
	resp, err := t.api.Do(req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		code, msg := apiError(resp)
		e := t.api.Fail(resp, msg)
		switch {
		case resp.Status == http.StatusConflict:
			// Zendesk: a concurrent request on the same resource; retry.
			e.Class, e.MayHaveActed = downstream.Transient, true
		case resp.Status == http.StatusBadRequest && code == "IdempotentRequestError":
			e.Err = fmt.Errorf("%w: %w", errKeyReused, e.Err)
		}
		return e
	}
	return resp.Result(out)
}

// errKeyReused marks Zendesk's 400 IdempotentRequestError: a key reused
// with another body. The class is read from the answer's error code where
// the answer is parsed, never from the error's text afterwards.
var errKeyReused = errors.New("zendesk: idempotency key reused with another body")

// isIdempotentRequestError: Zendesk's 400 for a key reused with another body.
func isIdempotentRequestError(err error) bool { return errors.Is(err, errKeyReused) }

// apiError reads Zendesk's error body: its code (the "error" member when it
// is a string, e.g. "RecordInvalid") and the message to show.
func apiError(r *rest.Response) (code, msg string) {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(r.Body, &e) == nil {
		_ = json.Unmarshal(e.Error, &code)
	}
	return code, message(r)
}

// message renders Zendesk's error body: {"error": "RecordInvalid",
// "description": "...", "details": {"field": [{"description": "..."}]}} or
// {"error": {"title": "...", "message": "..."}}.
func message(r *rest.Response) string {
	var e struct {
		Error       json.RawMessage                           `json:"error"`
		Description string                                    `json:"description"`
		Details     map[string][]struct{ Description string } `json:"details"`
	}
	if json.Unmarshal(r.Body, &e) != nil || len(e.Error) == 0 {
		return rest.Message(r)
	}
	var parts []string
	var s string
	var obj struct{ Title, Message string }
	if json.Unmarshal(e.Error, &s) == nil {
		parts = append(parts, s)
	} else if json.Unmarshal(e.Error, &obj) == nil {
		parts = append(parts, strings.TrimSpace(obj.Title+" "+obj.Message))
	}
	if e.Description != "" {
		parts = append(parts, e.Description)
	}
	for _, field := range slices.Sorted(maps.Keys(e.Details)) {
		for _, d := range e.Details[field] {
			parts = append(parts, field+": "+d.Description)
		}
	}
	return strings.Join(parts, ": ")
}
