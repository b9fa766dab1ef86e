// Package webhooktest is an httptest receiver of ticket webhooks
// (ticket.created; ticket.commented and ticket.updated about a ticket it
// took in, else 422) that keeps
// the contracts a careful receiver keeps: the IETF Idempotency-Key draft
// (a key is remembered for a window; a replay answers the first response; the
// same key with another payload is 422; the same key while its first request
// is still being processed is 409, see Hold) and Standard Webhooks signature
// verification (webhook-id, webhook-timestamp within 5 minutes,
// webhook-signature "v1,<base64 HMAC-SHA256 of id.timestamp.body>").
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream/downstreamtest"
)

// Path is where the receiver listens.
const Path = "/hooks/tickets"

// Tolerance is how far webhook-timestamp may be from the receiver's clock.
const Tolerance = 5 * time.Minute

// Options configure the receiver.
type Options struct {
	// Token, if set, must come as "Authorization: Bearer <token>".
	Token string
	// SigningSecret, if set ("whsec_" + base64), every request must carry a
	// valid Standard Webhooks signature.
	SigningSecret string
	// Window is how long a key is remembered (0: for ever).
	Window time.Duration
	// Now is the receiver's clock (nil: time.Now).
	Now func() time.Time
	// ConflictRetryAfter is the Retry-After of a 409 (0: 1s).
	ConflictRetryAfter time.Duration
}

// Delivery is one accepted webhook.
type Delivery struct {
	ID        string
	Key       string
	WebhookID string
	Body      []byte
}

type remembered struct {
	fingerprint [32]byte
	status      int
	body        []byte
	at          time.Time
}

// Fake is the receiver.
type Fake struct {
	Faults downstreamtest.Faults
	opts   Options
	key    []byte
	srv    string

	mu         sync.Mutex
	deliveries []Delivery
	keys       map[string]remembered
	hold       chan struct{}       // non-nil: requests with a new key wait for it to close
	inflight   map[string][32]byte // keys being processed → their payload's fingerprint
}

// New starts a receiver that stops when the test ends.
func New(t testing.TB, o Options) *Fake {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ConflictRetryAfter <= 0 {
		o.ConflictRetryAfter = time.Second
	}
	f := &Fake{opts: o, keys: map[string]remembered{}, inflight: map[string][32]byte{}}
	if o.SigningSecret != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(o.SigningSecret, "whsec_"))
		if err != nil {
			t.Fatalf("webhooktest: signing secret: %v", err)
		}
		f.key = key
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) { f.Faults.Serve(w, r, f.receive) })
	f.srv = downstreamtest.StartServer(t, mux).URL
	// Runs before the server closes (cleanups run last-in first-out): a
	// held request must not keep Close waiting.
	t.Cleanup(f.release)
	return f
}

// Hold makes the receiver slow, as one that processes a request at length:
// from now on a request with a new key is marked in flight and waits,
// before it is processed, until release is called (or
// downstreamtest.SlowLimit passes). Meanwhile a request with the same key
// and payload is answered 409 Conflict with Retry-After
// (Options.ConflictRetryAfter), and one with the same key and another
// payload 422, as the Idempotency-Key draft says. release lets the held
// requests through and ends the hold; it may be called more than once.
func (f *Fake) Hold() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold == nil {
		f.hold = make(chan struct{})
	}
	return f.release
}

func (f *Fake) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		close(f.hold)
		f.hold = nil
	}
}

// InFlight is the number of requests being processed (held by Hold).
func (f *Fake) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.inflight)
}

// URL is the address to post to.
func (f *Fake) URL() string { return f.srv + Path }

// Count is the number of deliveries accepted (not counting replays).
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.deliveries)
}

// Deliveries returns a copy of the accepted deliveries.
func (f *Fake) Deliveries() []Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Delivery(nil), f.deliveries...)
}

func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}

func (f *Fake) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if f.opts.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.opts.Token {
		problem(w, http.StatusUnauthorized, "Unauthorized", "missing or wrong bearer token")
		return
	}
	if f.key != nil {
		if why := f.verify(r.Header, body); why != "" {
			problem(w, http.StatusUnauthorized, "Unauthorized", "webhook signature: "+why)
			return
		}
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		problem(w, http.StatusBadRequest, "Bad Request", "this receiver requires an Idempotency-Key header")
		return
	}
	fp := sha256.Sum256(body)

	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.opts.Now()
	if prev, ok := f.keys[key]; ok && (f.opts.Window == 0 || now.Sub(prev.at) < f.opts.Window) {
		if prev.fingerprint != fp {
			problem(w, http.StatusUnprocessableEntity, "Unprocessable Content", "Idempotency-Key "+key+" was already used with another payload")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(prev.status)
		w.Write(prev.body)
		return
	}
	if first, ok := f.inflight[key]; ok {
		if first != fp {
			problem(w, http.StatusUnprocessableEntity, "Unprocessable Content", "Idempotency-Key "+key+" was already used with another payload")
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(f.opts.ConflictRetryAfter/time.Second)))
		problem(w, http.StatusConflict, "A request is outstanding for this Idempotency-Key",
			"a request with Idempotency-Key "+key+" is being processed")
		return
	}
	var p struct {
		Type string `json:"type"`
		Data struct {
			Title  string          `json:"title"`
			Ticket string          `json:"ticket"`
			Body   string          `json:"body"`
			Set    json.RawMessage `json:"set"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		problem(w, http.StatusBadRequest, "Bad Request", "body is not JSON: "+err.Error())
		return
	}
	// Validation failures are not remembered: a corrected retry may use the key.
	switch {
	case p.Type == "ticket.created" && strings.TrimSpace(p.Data.Title) == "":
		problem(w, http.StatusUnprocessableEntity, "Unprocessable Content", "type and data.title are required")
		return
	case p.Type == "ticket.commented" && strings.TrimSpace(p.Data.Body) == "",
		p.Type == "ticket.updated" && (len(p.Data.Set) == 0 || string(p.Data.Set) == "{}"):
		problem(w, http.StatusUnprocessableEntity, "Unprocessable Content", "data.body (a comment) or data.set (an update) is required")
		return
	case p.Type == "ticket.commented" || p.Type == "ticket.updated":
		if !f.known(p.Data.Ticket) {
			problem(w, http.StatusUnprocessableEntity, "Unprocessable Content", "unknown ticket "+strconv.Quote(p.Data.Ticket))
			return
		}
	case p.Type != "ticket.created":
		problem(w, http.StatusUnprocessableEntity, "Unprocessable Content", "unknown event type "+strconv.Quote(p.Type))
		return
	}
	if hold := f.hold; hold != nil {
		f.inflight[key] = fp
		f.mu.Unlock()
		select {
		case <-hold:
		case <-time.After(downstreamtest.SlowLimit):
		}
		f.mu.Lock()
		delete(f.inflight, key)
		now = f.opts.Now()
	}
	id := fmt.Sprintf("dlv_%d", len(f.deliveries)+1)
	f.deliveries = append(f.deliveries, Delivery{ID: id, Key: key, WebhookID: r.Header.Get("webhook-id"), Body: body})
	ans, _ := json.Marshal(map[string]string{"id": id, "url": f.srv + "/deliveries/" + id})
	f.keys[key] = remembered{fingerprint: fp, status: http.StatusCreated, body: ans, at: now}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(ans)
}

// known reports whether id names a ticket the receiver took in: the id it
// answered for a ticket.created, or that event's key; f.mu is held.
func (f *Fake) known(id string) bool {
	for _, d := range f.deliveries {
		var p struct{ Type string }
		if (d.ID == id || d.Key == id) && json.Unmarshal(d.Body, &p) == nil && p.Type == "ticket.created" {
			return true
		}
	}
	return false
}

// Events returns the data of the accepted events of type typ about ticket
// (ticket.commented, ticket.updated), oldest first, as JSON.
func (f *Fake) Events(typ, ticket string) []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []json.RawMessage
	for _, d := range f.deliveries {
		var p struct {
			Type string
			Data json.RawMessage
		}
		var t struct{ Ticket string }
		if json.Unmarshal(d.Body, &p) == nil && p.Type == typ && json.Unmarshal(p.Data, &t) == nil && t.Ticket == ticket {
			out = append(out, p.Data)
		}
	}
	return out
}

// verify checks a Standard Webhooks signature; it returns why it failed.
func (f *Fake) verify(h http.Header, body []byte) string {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "missing webhook-id, webhook-timestamp or webhook-signature"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "webhook-timestamp is not an integer"
	}
	if d := f.opts.Now().Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return "webhook-timestamp is too far from now"
	}
	m := hmac.New(sha256.New, f.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return ""
		}
	}
	return "no valid v1 signature"
}
