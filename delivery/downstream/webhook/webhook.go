// Package webhook delivers tickets as a JSON POST to any URL. The dedupe key
// travels as the Idempotency-Key header (IETF draft); the request is
// optionally signed per the Standard Webhooks specification, whose
// webhook-id is the dedupe key too, so a receiver may dedupe on either.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/ticket"
)

// Capabilities: the receiver is expected to honour Idempotency-Key; how long
// it remembers a key is its own business (Window 0). No lookup.
var Capabilities = downstream.Capabilities{DedupeKey: true}

// CapabilitiesNoDedupe: a receiver declared not to honour Idempotency-Key
// (Config.NoDedupe) gets the key anyway, but nothing is resent on its
// strength: an attempt of unknown outcome is uncertain.
var CapabilitiesNoDedupe = downstream.Capabilities{}

// EventType is the "type" of every payload.
const EventType = "ticket.created"

// Config configures one webhook target.
type Config struct {
	Name string
	// URL receives the POST.
	URL string
	// SigningSecret, if set, signs each request (Standard Webhooks): "whsec_"
	// followed by the base64 of the key.
	SigningSecret downstream.Secret
	// Token, if set, is sent as "Authorization: Bearer <token>".
	Token downstream.Secret
	// NoDedupe declares a receiver that does not honour Idempotency-Key.
	NoDedupe bool
	downstream.HTTPConfig
}

// Target posts tickets to a URL.
type Target struct {
	cfg Config
	key downstream.Secret // decoded signing key; zero when unsigned
	c   *rest.Client
}

var _ downstream.Target = (*Target)(nil)

// New validates cfg and builds the target.
func New(cfg Config) (*Target, error) {
	// A token may ride in the URL (?token=…): no error shows its userinfo,
	// query or fragment.
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("webhook %q: endpoint %q is not an http(s) URL", cfg.Name, rest.SafeRawURL(cfg.URL, false))
	}
	if u, err := url.Parse(cfg.URL); err != nil {
		return nil, fmt.Errorf("webhook %q: endpoint: %w", cfg.Name, rest.RedactURLError(err, false))
	} else if u.Host == "" {
		return nil, fmt.Errorf("webhook %q: endpoint %q has no host", cfg.Name, rest.SafeURL(u, false))
	}
	t := &Target{cfg: cfg, c: rest.NewClient(cfg.HTTP, cfg.Now).Redact(cfg.Token, cfg.SigningSecret)}
	if !cfg.SigningSecret.IsZero() {
		key, err := DecodeSecret(cfg.SigningSecret.Reveal())
		if err != nil {
			return nil, fmt.Errorf("webhook %q: signing secret: %w", cfg.Name, err)
		}
		t.key = downstream.NewSecret(string(key))
	}
	return t, nil
}

// DecodeSecret decodes a Standard Webhooks secret: "whsec_" + base64.
func DecodeSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return nil, errors.New(`must start with "whsec_" followed by base64`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New(`the part after "whsec_" is not valid base64`)
	}
	if len(key) < 16 {
		return nil, fmt.Errorf("the key is %d bytes; use at least 16 (24 to 64 recommended)", len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature value for a message: "v1," + base64 of
// HMAC-SHA256(key, id + "." + timestamp + "." + body).
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Payload is the JSON body (Standard Webhooks' recommended envelope).
type Payload struct {
	Type      string        `json:"type"`
	Timestamp time.Time     `json:"timestamp"`
	Data      ticket.Ticket `json:"data"`
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.cfg.Name }

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities {
	if t.cfg.NoDedupe {
		return CapabilitiesNoDedupe
	}
	return Capabilities
}

// Deliver posts the ticket. The body is the same on every attempt (the
// Idempotency-Key draft rejects a reused key with another payload); only the
// timestamp and signature headers change.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	body, err := json.Marshal(Payload{Type: EventType, Timestamp: d.Ticket.CreatedAt.UTC(), Data: d.Ticket.WithFields()})
	if err != nil {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: err}
	}
	return t.send(ctx, d.Key, body)
}

// send posts body with key as its Idempotency-Key (and webhook-id), and
// reads the receipt the receiver may give.
func (t *Target) send(ctx context.Context, key string, body []byte) (downstream.Receipt, error) {
	req, err := t.c.NewRequest(ctx, http.MethodPost, t.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return downstream.Receipt{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if !t.cfg.Token.IsZero() {
		req.Header.Set("Authorization", "Bearer "+t.cfg.Token.Reveal())
	}
	if !t.key.IsZero() {
		ts := t.c.Now().Unix()
		req.Header.Set("webhook-id", key)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", Sign([]byte(t.key.Reveal()), key, ts, body))
	}
	resp, err := t.c.Do(req)
	if err != nil {
		return downstream.Receipt{}, err
	}
	if !resp.OK() {
		return downstream.Receipt{}, t.fail(resp)
	}
	// The receiver's answer is its own: use an id and URL if it gives them.
	var ans struct {
		ID  any    `json:"id"`
		URL string `json:"url"`
	}
	_ = json.Unmarshal(resp.Body, &ans)
	r := downstream.Receipt{ExternalID: key, URL: ans.URL}
	switch id := ans.ID.(type) {
	case string:
		if id != "" {
			r.ExternalID = id
		}
	case float64:
		r.ExternalID = strconv.FormatFloat(id, 'f', -1, 64)
	}
	return r, nil
}

// fail translates a non-2xx answer as rest.Fail does, with the
// Idempotency-Key draft's meaning of 409: "a request with this key is still
// being processed". The draft exempts it from the rule that a client must
// correct a failed request before retrying it: resending the same payload
// with the same key is safe, so it is Transient (after the receiver's
// Retry-After, if any). MayHaveActed stays clear: this request was not
// processed, and whatever the request in progress does is bound to the key
// that every resend carries, so a resend either gets the same 409 or that
// request's stored answer, never a second delivery. 422 (the key reused with
// another payload) stays Permanent: a resend of the same body cannot fix it.
func (t *Target) fail(r *rest.Response) *downstream.Error {
	e := t.c.Fail(r, message(r))
	if r.Status == http.StatusConflict {
		e.Class, e.MayHaveActed = downstream.Transient, false
		e.Err = fmt.Errorf("%w (a request with the same Idempotency-Key is still being processed: resending later with that key is safe)", e.Err)
	}
	return e
}

// message reads an RFC 9457 problem (title/detail), a {"error"|"message"}
// object, or the body as text.
func message(r *rest.Response) string {
	var p struct {
		Title   string `json:"title"`
		Detail  string `json:"detail"`
		Error   any    `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(r.Body, &p) == nil {
		switch {
		case p.Detail != "" && p.Title != "":
			return p.Title + ": " + p.Detail
		case p.Detail != "":
			return p.Detail
		case p.Message != "":
			return p.Message
		case p.Title != "":
			return p.Title
		}
		if s, ok := p.Error.(string); ok && s != "" {
			return s
		}
	}
	return rest.Message(r)
}
