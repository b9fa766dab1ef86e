// Package pagerdutytest is an httptest fake of the PagerDuty Events API v2
// and of the REST API's incident list, keeping their documented contracts.
//
// Events API (URL):
//   - POST /v2/enqueue with routing_key (32 characters), event_action
//     trigger|acknowledge|resolve, payload{summary, source, severity} for a
//     trigger → 202 {"status":"success","message":"Event processed","dedup_key"}
//   - an invalid event → 400 {"status":"invalid event","message":"Event object
//     is invalid","errors":[...]}; a routing key of the right length that
//     belongs to no integration → 400 "Invalid routing key"
//   - dedup_key: a trigger whose key names an open alert applies to it (no
//     new alert); "Once the alert is resolved, any further events with the
//     same dedup_key will create a new alert (for trigger events) or be
//     dropped (for acknowledge and resolve events)"
//   - every new alert opens an incident whose incident_key is the dedup_key;
//     it appears in the REST API Options.IncidentLag after the 202 (the
//     Events API is asynchronous)
//
// REST API (APIURL), another host:
//   - GET /incidents with Authorization: Token token=<API key> (anything
//     else → 401 {"error":{"message":"Authentication failed","code":2006}}),
//     query incident_key, statuses[] (triggered, acknowledged, resolved; none:
//     all), date_range=all or since/until (default: the last month; at most 6
//     months), limit (default 25, at most 100), offset → 200 {"incidents":
//     [{id, type, html_url, status, incident_key, created_at, …}], "limit",
//     "offset", "more", "total": null}
//   - GET /incidents/{id} → 200 {"incident":{id, status, priority
//     {id} or null, assignments [{assignee {id}}], html_url, …}}; an
//     unknown (or not yet created) incident → 404 {"error":{"message":
//     "Not Found","code":2100}}
//   - PUT /incidents/{id} {"incident":{"type":"incident_reference",
//     status (acknowledged|resolved), priority {id}, assignments}} → 200;
//     a From header that names no user → 400 "Requester User Not Found";
//     a resolved incident → 400 "Incident Already Resolved"; an unknown
//     priority or user → 400 Invalid Input Provided
//   - POST /incidents/{id}/notes {"note":{"content"}} (From required) →
//     201 {"note":{id, content, created_at, user}}; blank content → 400
//     (NoteFaults inject faults here); GET /incidents/{id}/notes → every
//     note, oldest first, no pagination; read-after-write
package pagerdutytest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
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

// DefaultIncidentLag is how long after the 202 an incident appears in the
// REST API when Options leaves it 0.
const DefaultIncidentLag = time.Second

// WebURL is the web app address incidents' html_url point at.
const WebURL = "https://acme.pagerduty.example"

// Options are the fake's optional settings.
type Options struct {
	// APIToken is the REST API key GET /incidents accepts ("": none, every
	// REST call is 401).
	APIToken string
	// Now is the clock of alert creation and incident visibility (nil:
	// time.Now). Share it with the adapter to move time in a test.
	Now func() time.Time
	// IncidentLag: an incident appears in the REST API this long after the
	// trigger that opened it was accepted (0: DefaultIncidentLag; negative:
	// at once).
	IncidentLag time.Duration
}

// Alert is one alert and the incident it opened.
type Alert struct {
	DedupKey string
	Summary  string
	Source   string
	Severity string
	Open     bool
	Events   int // trigger events applied to it
	// The payload's optional fields, as the first trigger gave them.
	Component, Group, Class string
	CustomDetails           map[string]json.RawMessage

	IncidentID string
	Status     string // triggered, acknowledged or resolved
	CreatedAt  time.Time
	Priority   string   // a priority id, "" none
	Assignees  []string // user ids
	Notes      []Note
}

// Note is one note of an incident.
type Note struct {
	ID      string
	Content string
}

// Users are the account's users (id → email); Priorities its incident
// priorities (id → name).
var (
	Users      = map[string]string{"PUSER01": "bot@acme.test", "PUSER02": "oncall@acme.test"}
	Priorities = map[string]string{"PPRIO01": "P1", "PPRIO02": "P2", "PPRIO03": "P3", "PPRIO04": "P4", "PPRIO05": "P5"}
)

// Lookup is one authorized GET /incidents.
type Lookup struct {
	Query  url.Values
	Accept string
}

// Fake is one PagerDuty service with one Events API v2 integration.
type Fake struct {
	// Faults applies to POST /v2/enqueue.
	Faults downstreamtest.Faults
	// LookupFaults applies to GET /incidents.
	LookupFaults downstreamtest.Faults
	// NoteFaults applies to POST /incidents/{id}/notes.
	NoteFaults downstreamtest.Faults

	routingKey string
	opts       Options
	srv, api   string

	mu      sync.Mutex
	alerts  []*Alert
	lookups []Lookup
	notes   int // the last note id
}

// New starts a service whose integration key is routingKey (32 characters),
// with the REST API on another server (opts: at most one).
func New(t testing.TB, routingKey string, opts ...Options) *Fake {
	if len(routingKey) != 32 {
		t.Fatalf("pagerdutytest: a routing key has 32 characters, not %d", len(routingKey))
	}
	f := &Fake{routingKey: routingKey}
	if len(opts) > 0 {
		f.opts = opts[0]
	}
	if f.opts.Now == nil {
		f.opts.Now = time.Now
	}
	if f.opts.IncidentLag == 0 {
		f.opts.IncidentLag = DefaultIncidentLag
	}
	events := http.NewServeMux()
	events.HandleFunc("POST /v2/enqueue", func(w http.ResponseWriter, r *http.Request) { f.Faults.Serve(w, r, f.enqueue) })
	f.srv = downstreamtest.StartServer(t, events).URL
	api := http.NewServeMux()
	api.HandleFunc("GET /incidents", func(w http.ResponseWriter, r *http.Request) { f.LookupFaults.Serve(w, r, f.listIncidents) })
	api.HandleFunc("GET /incidents/{id}", f.restAuth(false, f.getIncident))
	api.HandleFunc("PUT /incidents/{id}", f.restAuth(true, f.putIncident))
	api.HandleFunc("GET /incidents/{id}/notes", f.restAuth(false, f.listNotes))
	api.HandleFunc("POST /incidents/{id}/notes", func(w http.ResponseWriter, r *http.Request) {
		f.NoteFaults.Serve(w, r, f.restAuth(true, f.addNote))
	})
	f.api = downstreamtest.StartServer(t, api).URL
	return f
}

// URL is the Events API base URL.
func (f *Fake) URL() string { return f.srv }

// APIURL is the REST API base URL.
func (f *Fake) APIURL() string { return f.api }

// Count is the number of alerts ever opened.
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.alerts)
}

// Alerts returns copies of the alerts, oldest first.
func (f *Fake) Alerts() []Alert {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Alert, len(f.alerts))
	for i, a := range f.alerts {
		out[i] = *a
	}
	return out
}

// Lookups returns the authorized GET /incidents requests, oldest first.
func (f *Fake) Lookups() []Lookup {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lookups)
}

// Resolve resolves the open alert with dedupKey, as a responder would in
// the web app; it reports whether there was one.
func (f *Fake) Resolve(dedupKey string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.open(dedupKey)
	if a == nil {
		return false
	}
	a.Open, a.Status = false, "resolved"
	return true
}

// open returns the open alert with key; f.mu is held.
func (f *Fake) open(key string) *Alert {
	for _, a := range f.alerts {
		if a.Open && a.DedupKey == key {
			return a
		}
	}
	return nil
}

func invalid(w http.ResponseWriter, errs ...string) {
	downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]any{"status": "invalid event", "message": "Event object is invalid", "errors": errs})
}

func (f *Fake) enqueue(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var ev struct {
		RoutingKey  string `json:"routing_key"`
		EventAction string `json:"event_action"`
		DedupKey    string `json:"dedup_key"`
		Payload     *struct {
			Summary       string                     `json:"summary"`
			Source        string                     `json:"source"`
			Severity      string                     `json:"severity"`
			Component     string                     `json:"component"`
			Group         string                     `json:"group"`
			Class         string                     `json:"class"`
			CustomDetails map[string]json.RawMessage `json:"custom_details"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		downstreamtest.WriteJSON(w, http.StatusBadRequest, map[string]any{
			"status": "Unrecognized object", "message": "Event object format is unrecognized", "errors": []string{"JSON parse error"}})
		return
	}
	if len(ev.RoutingKey) != 32 {
		invalid(w, "Length of 'routing_key' is incorrect (should be 32 characters)")
		return
	}
	if ev.RoutingKey != f.routingKey {
		invalid(w, "Invalid routing key")
		return
	}
	if len(ev.DedupKey) > 255 {
		invalid(w, "'dedup_key' is too long (maximum is 255 characters)")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ev.EventAction {
	case "trigger":
		var errs []string
		if ev.Payload == nil || strings.TrimSpace(ev.Payload.Summary) == "" {
			errs = append(errs, "'payload.summary' is missing or blank")
		}
		if ev.Payload == nil || strings.TrimSpace(ev.Payload.Source) == "" {
			errs = append(errs, "'payload.source' is missing or blank")
		}
		if ev.Payload == nil || !slices.Contains([]string{"critical", "error", "warning", "info"}, ev.Payload.Severity) {
			errs = append(errs, "'payload.severity' must be one of critical, error, warning, info")
		}
		if len(errs) > 0 {
			invalid(w, errs...)
			return
		}
		key := ev.DedupKey
		if key == "" {
			key = fmt.Sprintf("generated-%d", len(f.alerts)+1)
		}
		if a := f.open(key); a != nil {
			a.Events++
		} else {
			n := len(f.alerts) + 1
			f.alerts = append(f.alerts, &Alert{DedupKey: key, Summary: ev.Payload.Summary, Source: ev.Payload.Source,
				Severity: ev.Payload.Severity, Open: true, Events: 1,
				Component: ev.Payload.Component, Group: ev.Payload.Group, Class: ev.Payload.Class, CustomDetails: ev.Payload.CustomDetails,
				IncidentID: fmt.Sprintf("Q%06d", n), Status: "triggered", CreatedAt: f.opts.Now().UTC()})
		}
		ev.DedupKey = key
	case "acknowledge", "resolve":
		if ev.DedupKey == "" {
			invalid(w, "'dedup_key' is required for "+ev.EventAction)
			return
		}
		// No open alert with the key: the event is dropped (still a 202).
		if a := f.open(ev.DedupKey); a != nil {
			if ev.EventAction == "resolve" {
				a.Open, a.Status = false, "resolved"
			} else {
				a.Status = "acknowledged"
			}
		}
	default:
		invalid(w, "'event_action' must be one of trigger, acknowledge, resolve")
		return
	}
	downstreamtest.WriteJSON(w, http.StatusAccepted, map[string]string{"status": "success", "message": "Event processed", "dedup_key": ev.DedupKey})
}

func restError(w http.ResponseWriter, status, code int, msg string, errs ...string) {
	e := map[string]any{"message": msg, "code": code}
	if len(errs) > 0 {
		e["errors"] = errs
	}
	downstreamtest.WriteJSON(w, status, map[string]any{"error": e})
}

func (f *Fake) listIncidents(w http.ResponseWriter, r *http.Request) {
	if f.opts.APIToken == "" || r.Header.Get("Authorization") != "Token token="+f.opts.APIToken {
		restError(w, http.StatusUnauthorized, 2006, "Authentication failed")
		return
	}
	q := r.URL.Query()
	statuses := q["statuses[]"]
	for _, s := range statuses {
		if !slices.Contains([]string{"triggered", "acknowledged", "resolved"}, s) {
			restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Statuses has invalid value "+strconv.Quote(s))
			return
		}
	}
	now := f.opts.Now().UTC()
	var since, until time.Time // zero: no bound
	switch dr := q.Get("date_range"); dr {
	case "all":
	case "":
		until, since = now, now.AddDate(0, -1, 0)
		var err error
		if v := q.Get("until"); v != "" {
			if until, err = time.Parse(time.RFC3339, v); err != nil {
				restError(w, http.StatusBadRequest, 2004, "Invalid time values in 'since' and/or 'until' parameters")
				return
			}
		}
		if v := q.Get("since"); v != "" {
			if since, err = time.Parse(time.RFC3339, v); err != nil {
				restError(w, http.StatusBadRequest, 2004, "Invalid time values in 'since' and/or 'until' parameters")
				return
			}
		} else if q.Get("until") != "" {
			since = until.AddDate(0, -1, 0)
		}
		if until.Before(since) || until.Sub(since) > until.Sub(until.AddDate(0, -6, 0)) {
			restError(w, http.StatusBadRequest, 2005, "Invalid Query Date Range")
			return
		}
	default:
		restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Date range has invalid value "+strconv.Quote(dr))
		return
	}
	limit, offset := 25, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Limit must be a non-negative integer")
			return
		}
		limit = min(max(n, 1), 100)
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Offset must be a non-negative integer")
			return
		}
		offset = n
	}

	f.mu.Lock()
	f.lookups = append(f.lookups, Lookup{Query: q, Accept: r.Header.Get("Accept")})
	var match []map[string]any
	for i, a := range f.alerts {
		switch {
		case f.opts.IncidentLag > 0 && now.Before(a.CreatedAt.Add(f.opts.IncidentLag)):
			continue // not created yet
		case q.Has("incident_key") && a.DedupKey != q.Get("incident_key"):
			continue
		case len(statuses) > 0 && !slices.Contains(statuses, a.Status):
			continue
		case !since.IsZero() && (a.CreatedAt.Before(since) || !a.CreatedAt.Before(until)):
			continue
		}
		match = append(match, map[string]any{
			"id": a.IncidentID, "type": "incident", "summary": fmt.Sprintf("[#%d] %s", i+1, a.Summary),
			"self": f.api + "/incidents/" + a.IncidentID, "html_url": WebURL + "/incidents/" + a.IncidentID,
			"incident_number": i + 1, "title": a.Summary, "created_at": a.CreatedAt.Format(time.RFC3339),
			"status": a.Status, "incident_key": a.DedupKey, "urgency": "high",
		})
	}
	f.mu.Unlock()
	page := []map[string]any{}
	if offset < len(match) {
		page = match[offset:min(offset+limit, len(match))]
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{
		"incidents": page, "limit": limit, "offset": offset, "more": offset+len(page) < len(match), "total": nil,
	})
}

// AddIncident opens an alert and its incident as a trigger long ago
// would (visible at once), and returns the incident id.
func (f *Fake) AddIncident(summary string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.alerts) + 1
	a := &Alert{DedupKey: fmt.Sprintf("outside-%d", n), Summary: summary, Source: "monitoring", Severity: "error", Open: true, Events: 1,
		IncidentID: fmt.Sprintf("Q%06d", n), Status: "triggered", CreatedAt: f.opts.Now().UTC().Add(-time.Hour)}
	f.alerts = append(f.alerts, a)
	return a.IncidentID
}

// AddNotes adds n notes by someone else to incident id.
func (f *Fake) AddNotes(id string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.incident(id)
	for i := range n {
		f.notes++
		a.Notes = append(a.Notes, Note{ID: fmt.Sprintf("PNOTE%04d", f.notes), Content: fmt.Sprintf("note %d", i+1)})
	}
}

// Incident returns a copy of the alert of incident id (false: none).
func (f *Fake) Incident(id string) (Alert, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.incident(id)
	if a == nil {
		return Alert{}, false
	}
	c := *a
	c.Assignees, c.Notes = slices.Clone(a.Assignees), slices.Clone(a.Notes)
	return c, true
}

// incident finds a created incident; f.mu is held.
func (f *Fake) incident(id string) *Alert {
	now := f.opts.Now().UTC()
	for _, a := range f.alerts {
		if a.IncidentID == id && !(f.opts.IncidentLag > 0 && now.Before(a.CreatedAt.Add(f.opts.IncidentLag))) {
			return a
		}
	}
	return nil
}

// restAuth checks the REST API key and, where the call writes, the From
// header; it holds f.mu for h and finds {id} (404 if none).
func (f *Fake) restAuth(from bool, h func(http.ResponseWriter, *http.Request, *Alert)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if f.opts.APIToken == "" || r.Header.Get("Authorization") != "Token token="+f.opts.APIToken {
			restError(w, http.StatusUnauthorized, 2006, "Authentication failed")
			return
		}
		if from && !slices.Contains(slices.Collect(maps.Values(Users)), r.Header.Get("From")) {
			restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Requester User Not Found")
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		a := f.incident(r.PathValue("id"))
		if a == nil {
			restError(w, http.StatusNotFound, 2100, "Not Found")
			return
		}
		h(w, r, a)
	}
}

func (f *Fake) renderIncident(a *Alert) map[string]any {
	var prio any
	if a.Priority != "" {
		prio = map[string]string{"id": a.Priority, "type": "priority", "summary": Priorities[a.Priority]}
	}
	as := []map[string]any{}
	for _, u := range a.Assignees {
		as = append(as, map[string]any{"assignee": map[string]string{"id": u, "type": "user_reference"}})
	}
	return map[string]any{"id": a.IncidentID, "type": "incident", "status": a.Status, "incident_key": a.DedupKey, "title": a.Summary,
		"html_url": WebURL + "/incidents/" + a.IncidentID, "priority": prio, "assignments": as,
		"created_at": a.CreatedAt.Format(time.RFC3339)}
}

func (f *Fake) getIncident(w http.ResponseWriter, r *http.Request, a *Alert) {
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"incident": f.renderIncident(a)})
}

func (f *Fake) putIncident(w http.ResponseWriter, r *http.Request, a *Alert) {
	var in struct {
		Incident struct {
			Type     string  `json:"type"`
			Status   *string `json:"status"`
			Priority *struct {
				ID string `json:"id"`
			} `json:"priority"`
			Assignments *[]struct {
				Assignee struct {
					ID string `json:"id"`
				} `json:"assignee"`
			} `json:"assignments"`
		} `json:"incident"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Incident.Type != "incident_reference" {
		restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Incident type must be incident_reference")
		return
	}
	if a.Status == "resolved" {
		restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Incident Already Resolved")
		return
	}
	next := *a
	if s := in.Incident.Status; s != nil {
		if *s != "acknowledged" && *s != "resolved" {
			restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Status must be acknowledged or resolved")
			return
		}
		next.Status = *s
		next.Open = *s != "resolved"
	}
	if p := in.Incident.Priority; p != nil {
		if Priorities[p.ID] == "" {
			restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Priority not found")
			return
		}
		next.Priority = p.ID
	}
	if as := in.Incident.Assignments; as != nil {
		next.Assignees = nil
		for _, x := range *as {
			if Users[x.Assignee.ID] == "" {
				restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Assignee not found")
				return
			}
			next.Assignees = append(next.Assignees, x.Assignee.ID)
		}
	}
	*a = next
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"incident": f.renderIncident(a)})
}

func (f *Fake) renderNote(n Note) map[string]any {
	return map[string]any{"id": n.ID, "content": n.Content, "created_at": f.opts.Now().UTC().Format(time.RFC3339),
		"user": map[string]string{"id": "PUSER01", "type": "user_reference"}}
}

func (f *Fake) addNote(w http.ResponseWriter, r *http.Request, a *Alert) {
	var in struct {
		Note struct {
			Content string `json:"content"`
		} `json:"note"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || strings.TrimSpace(in.Note.Content) == "" {
		restError(w, http.StatusBadRequest, 2001, "Invalid Input Provided", "Content cannot be empty")
		return
	}
	f.notes++
	n := Note{ID: fmt.Sprintf("PNOTE%04d", f.notes), Content: in.Note.Content}
	a.Notes = append(a.Notes, n)
	downstreamtest.WriteJSON(w, http.StatusCreated, map[string]any{"note": f.renderNote(n)})
}

func (f *Fake) listNotes(w http.ResponseWriter, r *http.Request, a *Alert) {
	out := []map[string]any{}
	for _, n := range a.Notes {
		out = append(out, f.renderNote(n))
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"notes": out})
}
