package pagerduty

// Notes and updates of an incident, through the REST API: they need the
// REST API key (Config.APIToken) and the email of a PagerDuty user
// (Config.From), whom PagerDuty records as the author; without them the
// target adds no comments and updates nothing.
//
// PagerDuty takes no key for a note. A note ends with the key's marker on
// a line of its own (notes are plain text); FindComment reads the
// incident's notes (GET /incidents/{id}/notes: every note in one answer),
// written synchronously by the REST API: consistent.
//
// The ticket is an incident: its id (or its web page), or the dedup_key a
// trigger's receipt names, which is looked up as the incident's
// incident_key (the incident appears seconds after the trigger: until
// then, a transient error).

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
	_ downstream.Updater       = (*Target)(nil)
)

// MaxNote bounds a note's content, in characters.
const MaxNote = 25000

// CommentCapabilities implements downstream.Commenter: a consistent lookup
// of the marker among the incident's notes with a REST API key; nothing
// without one (AddComment then refuses).
func (t *Target) CommentCapabilities() downstream.Capabilities {
	if !t.rest() {
		return downstream.Capabilities{}
	}
	return downstream.Capabilities{Lookup: downstream.LookupConsistent}
}

// rest reports whether notes and updates are possible.
func (t *Target) rest() bool { return t.apiBase != "" && t.cfg.From != "" }

func (t *Target) needREST() error {
	if t.rest() {
		return nil
	}
	return &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
		"pagerduty %q: notes and updates need a REST API key (api_token) and a PagerDuty user's email (from)", t.cfg.Name)}
}

var incidentID = regexp.MustCompile(`^[A-Z0-9]{7,20}$`)

// ref is a parsed reference: an incident id, or a dedup_key to look up.
type ref struct{ id, dedupKey string }

// parse reads an incident id, its page (https://SUBDOMAIN.pagerduty.com/
// incidents/ID, or under Config.WebURL) or a dedup_key.
func (t *Target) parse(s string) (ref, error) {
	s = strings.TrimSpace(s)
	bad := downstream.BadTicket("pagerduty", t.cfg.Name, s,
		"an incident id (PABC123), its page (https://SUBDOMAIN.pagerduty.com/incidents/PABC123) or the dedup_key of its alert")
	if u, err := url.Parse(s); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
		id, ok := strings.CutPrefix(u.Path, "/incidents/")
		if !t.webHost(u) || !ok || !incidentID.MatchString(id) || u.RawQuery != "" {
			return ref{}, bad
		}
		return ref{id: id}, nil
	}
	if s == "" || len(s) > downstream.MaxKeyLen || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return ref{}, bad
	}
	if incidentID.MatchString(s) {
		return ref{id: s, dedupKey: s}, nil // an id, or a key that looks like one
	}
	return ref{dedupKey: s}, nil
}

func (t *Target) webHost(u *url.URL) bool {
	if t.cfg.WebURL != "" {
		w, err := url.Parse(t.cfg.WebURL)
		return err == nil && u.Scheme == w.Scheme && strings.EqualFold(u.Host, w.Host)
	}
	return u.Scheme == "https" && strings.HasSuffix(strings.ToLower(u.Host), ".pagerduty.com")
}

// ParseTicket implements downstream.TicketParser. A dedup_key is answered
// as it is: which incident it names is known only by asking.
func (t *Target) ParseTicket(s string) (downstream.Receipt, error) {
	r, err := t.parse(s)
	if err != nil {
		return downstream.Receipt{}, err
	}
	if r.id != "" {
		return downstream.Receipt{ExternalID: r.id, URL: t.incidentPage(r.id)}, nil
	}
	return downstream.Receipt{ExternalID: r.dedupKey}, nil
}

func (t *Target) incidentPage(id string) string {
	if t.cfg.WebURL != "" {
		return strings.TrimRight(t.cfg.WebURL, "/") + "/incidents/" + id
	}
	return ""
}

type incidentState struct {
	ID       string `json:"id"`
	HTMLURL  string `json:"html_url"`
	Status   string `json:"status"`
	Priority *struct {
		ID string `json:"id"`
	} `json:"priority"`
	Assignments []struct {
		Assignee struct {
			ID string `json:"id"`
		} `json:"assignee"`
	} `json:"assignments"`
}

// incident resolves a reference to the incident.
func (t *Target) incident(ctx context.Context, s string) (incidentState, error) {
	r, err := t.parse(s)
	if err != nil {
		return incidentState{}, err
	}
	if r.id != "" {
		var ans struct {
			Incident incidentState `json:"incident"`
		}
		err := t.restCall(ctx, http.MethodGet, "/incidents/"+r.id, nil, &ans)
		if err == nil || r.dedupKey == "" || downstream.Classify(err).StatusCode != http.StatusNotFound {
			return ans.Incident, err
		}
	}
	found, ok, err := t.Find(ctx, downstream.Delivery{Key: r.dedupKey})
	if err != nil {
		return incidentState{}, err
	}
	switch {
	case !ok && r.id != "":
		return incidentState{}, &downstream.Error{Class: downstream.Permanent, StatusCode: http.StatusNotFound, Err: fmt.Errorf(
			"pagerduty %q: no incident %s, and no incident whose incident_key is %q", t.cfg.Name, r.id, r.dedupKey)}
	case !ok:
		// The incident may not have appeared yet (the Events API is
		// asynchronous): not a proof that there is none.
		return incidentState{}, &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf(
			"pagerduty %q: no incident has incident_key %q (yet: an incident appears seconds after its trigger)", t.cfg.Name, r.dedupKey)}
	}
	return t.incident(ctx, found.ExternalID)
}

// restCall calls the REST API as Config.From.
func (t *Target) restCall(ctx context.Context, method, path string, in, out any) error {
	req, err := rest.NewJSONRequest(ctx, method, t.apiBase+path, in)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.pagerduty+json;version=2")
	req.Header.Set("Authorization", "Token token="+t.cfg.APIToken.Reveal())
	req.Header.Set("From", t.cfg.From)
	resp, err := t.api.Do(req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		return t.api.Fail(resp, restMessage(resp))
	}
	return resp.Result(out)
}

func noteTail(key string) string { return "\n\n" + downstream.Marker(key) }

type note struct {
	ID      string `json:"id"`
	Content string `json:"content"`
}

// AddComment implements downstream.Commenter: a note on the incident.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	if _, err := downstream.PrepareComment(t, d); err != nil {
		return downstream.CommentReceipt{}, err
	}
	if err := t.needREST(); err != nil {
		return downstream.CommentReceipt{}, err
	}
	in, err := t.incident(ctx, d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	var ans struct {
		Note note `json:"note"`
	}
	body := map[string]any{"note": map[string]string{"content": downstream.FitComment(d.Body, noteTail(d.Key), MaxNote)}}
	if err := t.restCall(ctx, http.MethodPost, "/incidents/"+in.ID+"/notes", body, &ans); err != nil {
		return downstream.CommentReceipt{}, err
	}
	return downstream.CommentReceipt{ExternalID: ans.Note.ID, URL: rest.Clean(in.HTMLURL)}, nil
}

// FindComment implements downstream.CommentFinder.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	if err := t.needREST(); err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	in, err := t.incident(ctx, d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	var ans struct {
		Notes []note `json:"notes"`
	}
	if err := t.restCall(ctx, http.MethodGet, "/incidents/"+in.ID+"/notes", nil, &ans); err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	marker := downstream.Marker(d.Key)
	for _, n := range ans.Notes {
		if strings.HasSuffix(strings.TrimRight(n.Content, " \r\n"), marker) {
			return downstream.CommentReceipt{ExternalID: n.ID, URL: rest.Clean(in.HTMLURL)}, true, nil
		}
	}
	return downstream.CommentReceipt{}, false, nil
}

// UpdateFields implements downstream.Updater: status (resolving; PagerDuty
// reopens no incident), priority (when PriorityIDs maps the account's
// priorities) and assignee (a user id), with the REST API; nothing
// without it. Incidents have no labels.
func (t *Target) UpdateFields() []downstream.Field {
	if !t.rest() {
		return nil
	}
	if len(t.cfg.PriorityIDs) == 0 {
		return []downstream.Field{downstream.FieldStatus, downstream.FieldAssignee}
	}
	return []downstream.Field{downstream.FieldStatus, downstream.FieldPriority, downstream.FieldAssignee}
}

// Update implements downstream.Updater.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	if _, err := t.parse(d.Ticket); err != nil {
		return downstream.Receipt{}, err
	}
	if err := t.needREST(); err != nil {
		return downstream.Receipt{}, err
	}
	u, err := downstream.CheckUpdate(t.cfg.Name, t.UpdateFields(), d.Set)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var prio string
	if u.Priority != "" {
		if prio = t.cfg.PriorityIDs[u.Priority]; prio == "" {
			return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
				"pagerduty %q: priority %q has no PagerDuty priority id (priority_ids maps %s)", t.cfg.Name, u.Priority, mappedKeys(t.cfg.PriorityIDs))}
		}
	}
	if u.Assignee != nil && !incidentID.MatchString(*u.Assignee) {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
			"pagerduty %q: assignee %q: want a PagerDuty user id (PABC123); an incident cannot be left without one", t.cfg.Name, *u.Assignee)}
	}
	in, err := t.incident(ctx, d.Ticket)
	if err != nil {
		return downstream.Receipt{}, err
	}
	r := downstream.Receipt{ExternalID: in.ID, URL: rest.Clean(in.HTMLURL)}
	resolved := in.Status == "resolved"
	if u.Status == downstream.StatusOpen && resolved {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
			"pagerduty %q: incident %s is resolved, and PagerDuty reopens no incident: trigger a new one", t.cfg.Name, in.ID)}
	}
	set := map[string]any{"type": "incident_reference"}
	if u.Status == downstream.StatusClosed && !resolved {
		set["status"] = "resolved"
	}
	if prio != "" && (in.Priority == nil || in.Priority.ID != prio) {
		set["priority"] = map[string]string{"id": prio, "type": "priority_reference"}
	}
	if u.Assignee != nil && (len(in.Assignments) != 1 || in.Assignments[0].Assignee.ID != *u.Assignee) {
		set["assignments"] = []map[string]any{{"assignee": map[string]string{"id": *u.Assignee, "type": "user_reference"}}}
	}
	if len(set) == 1 {
		return r, nil // already so: set twice is set once
	}
	return r, t.restCall(ctx, http.MethodPut, "/incidents/"+in.ID, map[string]any{"incident": set}, &struct{}{})
}

func mappedKeys(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}
