// Package zendesktest is an httptest fake of the Zendesk Support API's
// ticket endpoints, keeping its documented contract:
//   - API token auth: Basic base64("{email}/token:{api_token}"), else 401
//     {"error":"Couldn't authenticate you"}
//   - POST /api/v2/tickets[.json] → 201 {"ticket":{...}}; a blank first
//     comment → 422 RecordInvalid
//   - Idempotency-Key: remembered 2 hours per account (injectable clock); a
//     replay inside the window answers the first ticket with
//     "x-idempotency-lookup: hit" (a first use: "miss"); the same key with
//     another body → 400 IdempotentRequestError; after the window the key
//     is forgotten and a resend creates a second ticket
//   - external_id is not unique; GET /api/v2/tickets?external_id=X lists the
//     tickets that carry it, read-after-write
package zendesktest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/downstream/downstreamtest"
)

// KeyWindow is how long an Idempotency-Key is remembered.
const KeyWindow = 2 * time.Hour

// Ticket is a stored ticket.
type Ticket struct {
	ID         int64     `json:"id"`
	URL        string    `json:"url"`
	ExternalID string    `json:"external_id,omitempty"`
	Subject    string    `json:"subject"`
	Desc       string    `json:"description"`
	Priority   string    `json:"priority,omitempty"`
	Tags       []string  `json:"tags"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	// Requester is the requester object the create call sent, if any
	// (Zendesk answers a requester_id; the fake keeps what it was sent).
	Requester *Requester `json:"requester,omitempty"`
}

// Requester is a create call's requester object.
type Requester struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

type keyed struct {
	fingerprint [32]byte
	ticket      int64
	at          time.Time
}

// Fake is one Zendesk account.
type Fake struct {
	Faults downstreamtest.Faults
	email  string
	token  string
	now    func() time.Time
	srv    string

	mu      sync.Mutex
	tickets []Ticket
	keys    map[string]keyed
	lookups map[string]int // x-idempotency-lookup answers: "hit", "miss"
}

// New starts an account that accepts email/token; now is its clock (nil:
// time.Now).
func New(t testing.TB, email, token string, now func() time.Time) *Fake {
	if now == nil {
		now = time.Now
	}
	f := &Fake{email: email, token: token, now: now, keys: map[string]keyed{}, lookups: map[string]int{}}
	mux := http.NewServeMux()
	create := func(w http.ResponseWriter, r *http.Request) { f.Faults.Serve(w, r, f.auth(f.create)) }
	mux.HandleFunc("POST /api/v2/tickets", create)
	mux.HandleFunc("POST /api/v2/tickets.json", create)
	mux.HandleFunc("GET /api/v2/tickets", f.auth(f.list))
	mux.HandleFunc("GET /api/v2/tickets.json", f.auth(f.list))
	f.srv = downstreamtest.StartServer(t, mux).URL
	return f
}

// URL is the account's base URL.
func (f *Fake) URL() string { return f.srv }

// Count is the number of tickets.
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tickets)
}

// Tickets returns a copy of the tickets.
func (f *Fake) Tickets() []Ticket {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Ticket(nil), f.tickets...)
}

// Lookups counts the x-idempotency-lookup answers given ("hit", "miss").
func (f *Fake) Lookups(answer string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups[answer]
}

func (f *Fake) auth(h http.HandlerFunc) http.HandlerFunc {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(f.email+"/token:"+f.token))
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			downstreamtest.WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "Couldn't authenticate you"})
			return
		}
		h(w, r)
	}
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	fp := sha256.Sum256(body)

	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if key != "" {
		if k, ok := f.keys[key]; ok && now.Sub(k.at) < KeyWindow {
			if k.fingerprint != fp {
				downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]string{
					"error": "IdempotentRequestError", "description": "Request parameters don't match the given idempotency key"})
				return
			}
			f.lookups["hit"]++
			w.Header().Set("x-idempotency-lookup", "hit")
			downstreamtest.WriteJSON(w, http.StatusCreated, map[string]Ticket{"ticket": f.tickets[k.ticket-1]})
			return
		}
	}
	var in struct {
		Ticket struct {
			Subject string `json:"subject"`
			Comment struct {
				Body string `json:"body"`
			} `json:"comment"`
			Priority   string     `json:"priority"`
			Tags       []string   `json:"tags"`
			ExternalID string     `json:"external_id"`
			Requester  *Requester `json:"requester"`
		} `json:"ticket"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "Unprocessable JSON", "description": err.Error()})
		return
	}
	if r := in.Ticket.Requester; r != nil && (!strings.Contains(r.Email, "@") || strings.TrimSpace(r.Name) == "") {
		downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"error": "RecordInvalid", "description": "Record validation errors",
			"details": map[string]any{"requester": []map[string]string{{"description": "Requester: is invalid", "error": "InvalidValue"}}},
		})
		return
	}
	if strings.TrimSpace(in.Ticket.Comment.Body) == "" {
		downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"error": "RecordInvalid", "description": "Record validation errors",
			"details": map[string]any{"description": []map[string]string{{"description": "Description: cannot be blank", "error": "BlankValue"}}},
		})
		return
	}
	switch in.Ticket.Priority {
	case "", "low", "normal", "high", "urgent":
	default:
		downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"error": "RecordInvalid", "description": "Record validation errors",
			"details": map[string]any{"priority": []map[string]string{{"description": "Priority: is invalid", "error": "InvalidValue"}}},
		})
		return
	}
	id := int64(len(f.tickets) + 1)
	tk := Ticket{
		ID: id, URL: fmt.Sprintf("%s/api/v2/tickets/%d.json", f.srv, id), ExternalID: in.Ticket.ExternalID,
		Subject: in.Ticket.Subject, Desc: in.Ticket.Comment.Body, Priority: in.Ticket.Priority, Tags: in.Ticket.Tags,
		Status: "new", CreatedAt: now, Requester: in.Ticket.Requester,
	}
	f.tickets = append(f.tickets, tk)
	if key != "" {
		f.keys[key] = keyed{fingerprint: fp, ticket: id, at: now}
		f.lookups["miss"]++
		w.Header().Set("x-idempotency-lookup", "miss")
	}
	w.Header().Set("Location", tk.URL)
	downstreamtest.WriteJSON(w, http.StatusCreated, map[string]Ticket{"ticket": tk})
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	ext := r.URL.Query().Get("external_id")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []Ticket{}
	for _, tk := range f.tickets {
		if ext == "" || tk.ExternalID == ext {
			out = append(out, tk)
		}
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"tickets": out, "count": len(out), "next_page": nil, "previous_page": nil})
}
