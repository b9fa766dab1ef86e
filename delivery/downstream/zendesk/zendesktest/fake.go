// Package zendesktest is an httptest fake of the Zendesk Support API's
// ticket endpoints, keeping its documented contract:
//   - API token auth: Basic base64("{email}/token:{api_token}"), else 401
//     {"error":"Couldn't authenticate you"}
//   - POST /api/v2/tickets[.json] → 201 {"ticket":{...}}; a blank first
//     comment → 422 RecordInvalid; group_id not in Groups, assignee_id not
//     in Agents, a type other than problem/incident/question/task, or a
//     custom_fields item {"id","value"} whose id is not in TicketFields →
//     422 RecordInvalid naming the field
//   - Idempotency-Key: remembered 2 hours per account (injectable clock); a
//     replay inside the window answers the first ticket with
//     "x-idempotency-lookup: hit" (a first use: "miss"); the same key with
//     another body → 400 IdempotentRequestError; after the window the key
//     is forgotten and a resend creates a second ticket
//   - external_id is not unique; GET /api/v2/tickets?external_id=X lists the
//     tickets that carry it, read-after-write
//   - GET /api/v2/tickets/{id}[.json] → 200 {"ticket":{…, status,
//     priority, tags, assignee_id}}; an unknown ticket → 404
//     {"error":"RecordNotFound","description":"Not found"}
//   - PUT /api/v2/tickets/{id}[.json] {"ticket":{comment {body, public},
//     status, priority, tags, assignee_id}} → 200 {"ticket", "audit":
//     {"events":[{"id","type":"Comment"}, {"type":"Change"}…]}}; a closed
//     ticket → 422 "Status: closed prevents ticket update"; an unknown
//     status or priority or an assignee who is no agent → 422
//     RecordInvalid (CommentFaults inject faults here)
//   - GET /api/v2/tickets/{id}/comments?page[size]=N[&page[after]=C] →
//     {"comments", "meta":{"has_more","after_cursor"}, "links":{"next"}},
//     oldest first, at most 100 a page; the ticket's description is its
//     first comment; read-after-write
package zendesktest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream/downstreamtest"
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
	Requester  *Requester `json:"requester,omitempty"`
	AssigneeID *int64     `json:"assignee_id"`
	// What a create tool's fields set.
	GroupID      *int64        `json:"group_id,omitempty"`
	BrandID      *int64        `json:"brand_id,omitempty"`
	TicketFormID *int64        `json:"ticket_form_id,omitempty"`
	Type         string        `json:"type,omitempty"`
	CustomFields []CustomField `json:"custom_fields,omitempty"`
	// Comments are the ticket's comments, its description first.
	Comments []Comment `json:"-"`
}

// Comment is one comment of a ticket.
type Comment struct {
	ID     int64  `json:"id"`
	Body   string `json:"body"`
	Public bool   `json:"public"`
}

// Agents are the user ids a ticket may be assigned to.
var Agents = []int64{1001, 1002}

// MaxComments is the most comments the fake lists on one page.
const MaxComments = 100

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
	Faults        downstreamtest.Faults // of creates
	CommentFaults downstreamtest.Faults // of ticket updates (PUT)
	email         string
	token         string
	now           func() time.Time
	srv           string

	mu      sync.Mutex
	tickets []Ticket
	keys    map[string]keyed
	lookups map[string]int // x-idempotency-lookup answers: "hit", "miss"
	events  int64          // the last audit event id
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
	mux.HandleFunc("GET /api/v2/tickets/{id}", f.auth(f.show))
	mux.HandleFunc("PUT /api/v2/tickets/{id}", func(w http.ResponseWriter, r *http.Request) { f.CommentFaults.Serve(w, r, f.auth(f.update)) })
	mux.HandleFunc("GET /api/v2/tickets/{id}/comments", f.auth(f.comments))
	mux.HandleFunc("GET /api/v2/tickets/{id}/comments.json", f.auth(f.comments))
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
			// A create tool's fields.
			GroupID      *int64        `json:"group_id"`
			AssigneeID   *int64        `json:"assignee_id"`
			BrandID      *int64        `json:"brand_id"`
			TicketFormID *int64        `json:"ticket_form_id"`
			Type         string        `json:"type"`
			CustomFields []CustomField `json:"custom_fields"`
		} `json:"ticket"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "Unprocessable JSON", "description": err.Error()})
		return
	}
	if field, problem := checkFields(in.Ticket.GroupID, in.Ticket.AssigneeID, in.Ticket.Type, in.Ticket.CustomFields); field != "" {
		invalidRecord(w, field, problem)
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
		AssigneeID: in.Ticket.AssigneeID, GroupID: in.Ticket.GroupID, BrandID: in.Ticket.BrandID, TicketFormID: in.Ticket.TicketFormID,
		Type: in.Ticket.Type, CustomFields: in.Ticket.CustomFields,
	}
	f.events++
	tk.Comments = []Comment{{ID: f.events, Body: tk.Desc, Public: true}}
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

// AddTicket files a ticket as a user would, and returns its id.
func (f *Fake) AddTicket(subject string, tags ...string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := int64(len(f.tickets) + 1)
	f.events++
	f.tickets = append(f.tickets, Ticket{ID: id, URL: fmt.Sprintf("%s/api/v2/tickets/%d.json", f.srv, id), Subject: subject,
		Desc: subject, Tags: tags, Status: "new", Priority: "normal", CreatedAt: f.now(), Comments: []Comment{{ID: f.events, Body: subject, Public: true}}})
	return id
}

// AddComments adds n comments by someone else to ticket id.
func (f *Fake) AddComments(id int64, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tk := f.ticket(id)
	for i := range n {
		f.events++
		tk.Comments = append(tk.Comments, Comment{ID: f.events, Body: fmt.Sprintf("comment %d", i+1), Public: true})
	}
}

// Ticket returns a copy of ticket id (false: none).
func (f *Fake) Ticket(id int64) (Ticket, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tk := f.ticket(id)
	if tk == nil {
		return Ticket{}, false
	}
	c := *tk
	c.Tags, c.Comments = slices.Clone(tk.Tags), slices.Clone(tk.Comments)
	return c, true
}

// SetStatus sets ticket id's status as an agent or a trigger would.
func (f *Fake) SetStatus(id int64, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ticket(id).Status = status
}

func (f *Fake) ticket(id int64) *Ticket {
	for i := range f.tickets {
		if f.tickets[i].ID == id {
			return &f.tickets[i]
		}
	}
	return nil
}

// ticketOf reads {id} (with or without .json); nil (after a 404) if no
// such ticket.
func (f *Fake) ticketOf(w http.ResponseWriter, r *http.Request) *Ticket {
	n, err := strconv.ParseInt(strings.TrimSuffix(r.PathValue("id"), ".json"), 10, 64)
	var tk *Ticket
	if err == nil {
		tk = f.ticket(n)
	}
	if tk == nil {
		downstreamtest.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "RecordNotFound", "description": "Not found"})
	}
	return tk
}

func (f *Fake) show(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tk := f.ticketOf(w, r); tk != nil {
		downstreamtest.WriteJSON(w, http.StatusOK, map[string]Ticket{"ticket": *tk})
	}
}

func invalidRecord(w http.ResponseWriter, field, description string) {
	downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"error": "RecordInvalid", "description": "Record validation errors",
		"details": map[string]any{field: []map[string]string{{"description": description, "error": "InvalidValue"}}},
	})
}

func (f *Fake) update(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Ticket struct {
			Comment *struct {
				Body   string `json:"body"`
				Public *bool  `json:"public"`
			} `json:"comment"`
			Status     *string         `json:"status"`
			Priority   *string         `json:"priority"`
			Tags       *[]string       `json:"tags"`
			AssigneeID json.RawMessage `json:"assignee_id"`
		} `json:"ticket"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "Unprocessable JSON", "description": err.Error()})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tk := f.ticketOf(w, r)
	if tk == nil {
		return
	}
	if tk.Status == "closed" {
		invalidRecord(w, "status", "Status: closed prevents ticket update")
		return
	}
	next := *tk
	in2 := in.Ticket
	if in2.Status != nil {
		if !slices.Contains([]string{"new", "open", "pending", "hold", "solved", "closed"}, *in2.Status) {
			invalidRecord(w, "status", "Status: is invalid")
			return
		}
		next.Status = *in2.Status
	}
	if in2.Priority != nil {
		if !slices.Contains([]string{"low", "normal", "high", "urgent"}, *in2.Priority) {
			invalidRecord(w, "priority", "Priority: is invalid")
			return
		}
		next.Priority = *in2.Priority
	}
	if in2.Tags != nil {
		next.Tags = slices.Clone(*in2.Tags)
	}
	if len(in2.AssigneeID) > 0 {
		var a *int64
		if json.Unmarshal(in2.AssigneeID, &a) != nil || a != nil && !slices.Contains(Agents, *a) {
			invalidRecord(w, "assignee", "Assignee: is not an agent")
			return
		}
		next.AssigneeID = a
	}
	events := []map[string]any{}
	if c := in2.Comment; c != nil {
		if strings.TrimSpace(c.Body) == "" {
			invalidRecord(w, "comment", "Comment: cannot be blank")
			return
		}
		f.events++
		public := c.Public == nil || *c.Public
		next.Comments = append(slices.Clone(tk.Comments), Comment{ID: f.events, Body: c.Body, Public: public})
		events = append(events, map[string]any{"id": f.events, "type": "Comment", "body": c.Body, "public": public})
	}
	*tk = next
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"ticket": next, "audit": map[string]any{"events": events}})
}

func (f *Fake) comments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size, err := strconv.Atoi(q.Get("page[size]"))
	if err != nil || size <= 0 || size > MaxComments {
		size = MaxComments
	}
	after, _ := strconv.Atoi(q.Get("page[after]"))
	f.mu.Lock()
	defer f.mu.Unlock()
	tk := f.ticketOf(w, r)
	if tk == nil {
		return
	}
	start := min(max(after, 0), len(tk.Comments))
	end := min(start+size, len(tk.Comments))
	more := end < len(tk.Comments)
	links := map[string]any{"next": nil}
	if more {
		v := url.Values{"page[size]": {strconv.Itoa(size)}, "page[after]": {strconv.Itoa(end)}}
		links["next"] = f.srv + r.URL.Path + "?" + v.Encode()
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"comments": tk.Comments[start:end],
		"meta": map[string]any{"has_more": more, "after_cursor": strconv.Itoa(end)}, "links": links})
}

// CustomField is one item of a ticket's custom_fields: a field by its id
// and its value.
type CustomField struct {
	ID    int64           `json:"id"`
	Value json.RawMessage `json:"value"`
}

// Groups are the account's groups, TicketFields its custom ticket fields.
var (
	Groups       = []int64{2001, 2002}
	TicketFields = []int64{360001, 360002}
)

// checkFields checks a create's fields as Zendesk does: the group and
// assignee must exist, the type be one of the four, each custom field be
// one of the account's, by id, with a value. It names the field at fault
// and the problem, or returns "".
func checkFields(group, assignee *int64, typ string, custom []CustomField) (field, problem string) {
	switch {
	case group != nil && !slices.Contains(Groups, *group):
		return "group", "Group: is invalid"
	case assignee != nil && !slices.Contains(Agents, *assignee):
		return "assignee", "Assignee: is not an agent"
	case typ != "" && !slices.Contains([]string{"problem", "incident", "question", "task"}, typ):
		return "type", "Type: is invalid"
	}
	for _, c := range custom {
		if !slices.Contains(TicketFields, c.ID) || len(c.Value) == 0 {
			return "custom_fields", fmt.Sprintf("Custom field %d: is invalid", c.ID)
		}
	}
	return "", ""
}
