// Package redminetest is an httptest fake of Redmine's REST API for
// issues, keeping the contract of Redmine 5.0 (checked against Debian's
// redmine 5.0.4):
//   - authentication: X-Redmine-API-Key header or ?key=; none or a wrong
//     one → 401 with an empty body
//   - POST /issues.json {"issue":{project_id, tracker_id, subject,
//     description, priority_id, assigned_to_id, custom_fields:[{id,
//     value}]}} → 201
//     {"issue":{...}} with Location; an unknown project → 422 "Project
//     cannot be blank"; a blank subject → 422 "Subject cannot be blank";
//     a subject over 255 characters → 422 "Subject is too long (maximum is
//     255 characters)"; an unknown priority → 422 "Priority cannot be
//     blank"; a project without trackers → 422 "Tracker cannot be blank";
//     a tracker the project does not enable → its first tracker (no
//     error); an assignee not in Users → 422 "Assignee is invalid"; a
//     custom field the project does not enable → dropped (no error), a
//     value kept as text (a number as its digits); a body that is not
//     JSON → 400
//   - GET /issues.json?project_id=… (identifier or id; unknown → 404) with
//     explicit filters f[]=…&op[…]=…&v[…][]=… or short ones (status_id=*,
//     cf_N=value, subject=~text): status_id (* any, o open, default o),
//     cf_N (=, exact), subject (~, contains, case-insensitive); a filter
//     Redmine does not offer is ignored without an error: on an unknown
//     field, or on a custom field that is not enabled for the project (for
//     a list without project_id: for any project) or is not "Used as a
//     filter" (is_filter false, see SetFilter); sort=id or id:desc
//     (default id:desc), limit (default 25, at most 100), offset
//   - GET /issues/{id}.json[?include=journals] → 200 {"issue":{…, status
//     {id, name, is_closed}, priority, assigned_to (absent when none),
//     journals:[{id, user, notes, private_notes, details}]}} (every journal,
//     no pagination); an unknown issue → 404 with an empty body
//   - PUT /issues/{id}.json {"issue":{notes, status_id, priority_id,
//     assigned_to_id}} → 204 No Content, one journal per change (notes ""
//     for a change without them); an unknown issue → 404; an unknown
//     priority → 422 "Priority cannot be blank", an unknown assignee → 422
//     "Assignee is invalid", an unknown status → 422 "Status is not
//     included in the list"; a status change the workflow does not allow
//     (SetWorkflow) is ignored without an error
//   - GET /issue_statuses.json → Redmine's default statuses
//   - read-after-write: a created issue is in every later list, a note in
//     every later read of its issue
package redminetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"ticketrelay/delivery/downstream/downstreamtest"
)

// Issue is a stored issue.
type Issue struct {
	ID          int64
	Project     string // identifier
	TrackerID   int
	PriorityID  int
	Subject     string
	Description string
	Closed      bool
	Custom      map[int]string
	StatusID    int
	AssigneeID  int // 0: none
	Journals    []Journal
}

// Journal is one change of an issue: a note, field changes, or both.
type Journal struct {
	ID    int64
	Notes string
}

// Statuses are Redmine's default issue statuses (id → name, closed).
var Statuses = []struct {
	ID     int
	Name   string
	Closed bool
}{{1, "New", false}, {2, "In Progress", false}, {3, "Resolved", false}, {4, "Feedback", false}, {5, "Closed", true}, {6, "Rejected", true}}

// Users are the users an issue may be assigned to.
var Users = map[int]string{1: "Redmine Admin", 5: "Jane Doe"}

func statusClosed(id int) (closed, ok bool) {
	for _, s := range Statuses {
		if s.ID == id {
			return s.Closed, true
		}
	}
	return false, false
}

// Project is one project of the fake.
type Project struct {
	ID         int
	Identifier string
	Trackers   []int // enabled trackers, the first is the default
	Fields     []int // enabled issue custom fields
}

// Fake is one Redmine.
type Fake struct {
	Faults downstreamtest.Faults // of creates
	Notes  downstreamtest.Faults // of issue updates (PUT), notes or not
	key    string
	srv    string

	mu       sync.Mutex
	projects []Project
	issues   []Issue
	noFilter map[int]bool // custom fields with is_filter false
	foldCase bool         // cf_N = compares without regard to case
	journals int64        // the last journal id
	noStatus bool         // the workflow allows no status change
}

// Trackers, priorities and the default priority of the fake (Redmine's
// default data).
var (
	Trackers        = map[int]string{1: "Bug", 2: "Feature", 3: "Support"}
	Priorities      = map[int]string{1: "Low", 2: "Normal", 3: "High", 4: "Urgent", 5: "Immediate"}
	DefaultPriority = 2
)

// New starts a Redmine that accepts apiKey, with project (identifier, id
// 1, every tracker, custom field fieldID enabled; fieldID 0: none).
func New(t testing.TB, apiKey, project string, fieldID int) *Fake {
	f := &Fake{key: apiKey, noFilter: map[int]bool{}}
	var fields []int
	if fieldID != 0 {
		fields = []int{fieldID}
	}
	f.projects = []Project{{ID: 1, Identifier: project, Trackers: []int{1, 2, 3}, Fields: fields}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /issues.json", func(w http.ResponseWriter, r *http.Request) {
		f.Faults.Serve(w, r, f.check(f.create))
	})
	mux.HandleFunc("GET /issues.json", f.check(f.list))
	mux.HandleFunc("GET /issues/{id}", f.check(f.show))
	mux.HandleFunc("PUT /issues/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.Notes.Serve(w, r, f.check(f.update))
	})
	mux.HandleFunc("GET /issue_statuses.json", f.check(func(w http.ResponseWriter, r *http.Request) {
		var out []map[string]any
		for _, s := range Statuses {
			out = append(out, map[string]any{"id": s.ID, "name": s.Name, "is_closed": s.Closed})
		}
		downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"issue_statuses": out})
	}))
	f.srv = downstreamtest.StartServer(t, mux).URL
	return f
}

// URL is the Redmine root.
func (f *Fake) URL() string { return f.srv }

// AddProject adds a project.
func (f *Fake) AddProject(p Project) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.projects = append(f.projects, p)
}

// SetFilter sets a custom field's "Used as a filter" (is_filter; true for
// every field until set). Redmine offers no filter on a field that is not
// one: a list filtered on it comes back as if unfiltered on it.
func (f *Fake) SetFilter(fieldID int, isFilter bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noFilter[fieldID] = !isFilter
}

// SetFoldCase makes the custom field filter (=) compare without regard to
// case, as Redmine does on MySQL with its default (_ci) collation: Redmine
// filters with SQL "IN (…)" and leaves the comparison to the database.
func (f *Fake) SetFoldCase(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.foldCase = on
}

// Count is the number of issues.
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.issues)
}

// Issues returns a copy of the issues.
func (f *Fake) Issues() []Issue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.issues)
}

// Close closes issue id (a lookup with status_id=* still finds it).
func (f *Fake) Close(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.issues {
		if f.issues[i].ID == id {
			f.issues[i].Closed, f.issues[i].StatusID = true, 5
		}
	}
}

func (f *Fake) check(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("X-Redmine-API-Key")
		if k == "" {
			k = r.URL.Query().Get("key")
		}
		if k != f.key {
			w.Header().Set("WWW-Authenticate", `Basic realm="Redmine API"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

func (f *Fake) project(ref string) *Project {
	for i, p := range f.projects {
		if p.Identifier == ref || strconv.Itoa(p.ID) == ref {
			return &f.projects[i]
		}
	}
	return nil
}

// id reads a JSON number or numeric string, as Rails does.
func id(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, true
		}
		n = json.Number(s)
	}
	v, err := strconv.Atoi(n.String())
	if err != nil {
		return 0, true
	}
	return v, true
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var in struct {
		Issue struct {
			ProjectID    json.RawMessage `json:"project_id"`
			TrackerID    json.RawMessage `json:"tracker_id"`
			PriorityID   json.RawMessage `json:"priority_id"`
			AssignedToID json.RawMessage `json:"assigned_to_id"`
			Subject      string          `json:"subject"`
			Description  string          `json:"description"`
			CustomFields []struct {
				ID    int             `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"custom_fields"`
		} `json:"issue"`
	}
	if json.Unmarshal(body, &in) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var ref string
	if json.Unmarshal(in.Issue.ProjectID, &ref) != nil {
		if n, ok := id(in.Issue.ProjectID); ok {
			ref = strconv.Itoa(n)
		}
	}
	var errs []string
	p := f.project(ref)
	is := Issue{Subject: strings.TrimSpace(in.Issue.Subject), Description: in.Issue.Description, Custom: map[int]string{}}
	switch {
	case p == nil || len(p.Trackers) == 0:
		// Redmine offers only projects with a tracker as targets.
		errs = append(errs, "Project cannot be blank", "Tracker cannot be blank", "Status cannot be blank")
	default:
		is.Project = p.Identifier
		is.TrackerID = p.Trackers[0]
		if t, ok := id(in.Issue.TrackerID); ok && slices.Contains(p.Trackers, t) {
			is.TrackerID = t
		}
		for _, cf := range in.Issue.CustomFields {
			// Redmine keeps a value as text: a number is its digits.
			v, isNumber := "", json.Unmarshal(cf.Value, new(float64)) == nil
			if slices.Contains(p.Fields, cf.ID) && (json.Unmarshal(cf.Value, &v) == nil || isNumber) {
				if isNumber {
					v = string(cf.Value)
				}
				is.Custom[cf.ID] = v
			}
		}
	}
	if len(in.Issue.AssignedToID) > 0 {
		if u, _ := id(in.Issue.AssignedToID); Users[u] != "" {
			is.AssigneeID = u
		} else {
			errs = append(errs, "Assignee is invalid")
		}
	}
	switch n := utf8.RuneCountInString(is.Subject); {
	case n == 0:
		errs = append(errs, "Subject cannot be blank")
	case n > 255:
		errs = append(errs, "Subject is too long (maximum is 255 characters)")
	}
	is.PriorityID = DefaultPriority
	if pr, ok := id(in.Issue.PriorityID); ok {
		is.PriorityID = pr
		if Priorities[pr] == "" {
			errs = append(errs, "Priority cannot be blank")
		}
	}
	if len(errs) > 0 {
		downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"errors": errs})
		return
	}
	is.ID = int64(len(f.issues) + 1)
	is.StatusID = 1
	f.issues = append(f.issues, is)
	w.Header().Set("Location", fmt.Sprintf("%s/issues/%d", f.srv, is.ID))
	downstreamtest.WriteJSON(w, http.StatusCreated, map[string]any{"issue": f.render(is)})
}

// filter is one issue filter: a field, an operator and values.
type filter struct {
	field, op string
	values    []string
}

// filters reads explicit filters (f[], op[…], v[…][]) or, without f[],
// short ones, as Redmine's IssueQuery#build_from_params does.
func filters(q map[string][]string) []filter {
	var out []filter
	if fs, ok := q["f[]"]; ok {
		for _, fld := range fs {
			if fld == "" {
				continue
			}
			out = append(out, filter{field: fld, op: first(q["op["+fld+"]"]), values: q["v["+fld+"][]"]})
		}
		return out
	}
	for k, vs := range q {
		if k != "status_id" && k != "subject" && !strings.HasPrefix(k, "cf_") {
			continue
		}
		v := first(vs)
		op := "="
		for _, o := range []string{"!*", "!~", "!", "*", "~", "o", "c"} {
			if rest, ok := strings.CutPrefix(v, o); ok && (o != "o" && o != "c" || rest == "") {
				op, v = o, rest
				break
			}
		}
		out = append(out, filter{field: k, op: op, values: strings.Split(v, "|")})
	}
	return out
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	defer f.mu.Unlock()
	var p *Project
	if ref := q.Get("project_id"); ref != "" {
		if p = f.project(ref); p == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
	}
	fs := slices.DeleteFunc(filters(q), func(x filter) bool { return !f.offered(p, x.field) })
	hasStatus := slices.ContainsFunc(fs, func(x filter) bool { return x.field == "status_id" })
	if !hasStatus {
		fs = append(fs, filter{field: "status_id", op: "o"})
	}
	var match []Issue
	for _, is := range f.issues {
		if p != nil && is.Project != p.Identifier {
			continue
		}
		ok := true
		for _, x := range fs {
			ok = ok && x.matches(is, f.foldCase)
		}
		if ok {
			match = append(match, is)
		}
	}
	if q.Get("sort") != "id" && q.Get("sort") != "id:asc" {
		slices.Reverse(match)
	}
	offset, _ := strconv.Atoi(q.Get("offset"))
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 25
	}
	limit = min(limit, 100)
	total := len(match)
	match = match[min(max(offset, 0), len(match)):]
	match = match[:min(limit, len(match))]
	out := []map[string]any{}
	for _, is := range match {
		out = append(out, f.render(is))
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"issues": out, "total_count": total, "offset": offset, "limit": limit})
}

// offered reports whether Redmine offers a filter on field in a list of
// project p (nil: of every project), as IssueQuery#available_filters does:
// a custom field must be enabled for the project and be a filter.
func (f *Fake) offered(p *Project, field string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(field, "cf_"))
	if !strings.HasPrefix(field, "cf_") {
		return field == "status_id" || field == "subject"
	}
	if err != nil || f.noFilter[n] {
		return false
	}
	if p != nil {
		return slices.Contains(p.Fields, n)
	}
	return slices.ContainsFunc(f.projects, func(p Project) bool { return slices.Contains(p.Fields, n) })
}

// matches applies an offered filter; an operator it does not know matches
// all.
func (x filter) matches(is Issue, foldCase bool) bool {
	switch {
	case x.field == "status_id":
		switch x.op {
		case "*":
			return true
		case "o":
			return !is.Closed
		case "c":
			return is.Closed
		}
	case x.field == "subject" && x.op == "~":
		for _, v := range x.values {
			if !strings.Contains(strings.ToLower(is.Subject), strings.ToLower(v)) {
				return false
			}
		}
		return true
	case strings.HasPrefix(x.field, "cf_") && x.op == "=":
		n, err := strconv.Atoi(strings.TrimPrefix(x.field, "cf_"))
		if err != nil {
			return true
		}
		v, ok := is.Custom[n]
		return ok && slices.ContainsFunc(x.values, func(w string) bool { return w == v || foldCase && strings.EqualFold(w, v) })
	}
	return true
}

func (f *Fake) render(is Issue) map[string]any {
	var p Project
	if pp := f.project(is.Project); pp != nil {
		p = *pp
	}
	cfs := []map[string]any{}
	for _, id := range p.Fields {
		var v any
		if s, ok := is.Custom[id]; ok {
			v = s
		}
		cfs = append(cfs, map[string]any{"id": id, "name": "ticketrelay request", "value": v})
	}
	m := map[string]any{
		"id":            is.ID,
		"project":       map[string]any{"id": p.ID, "name": p.Identifier},
		"tracker":       map[string]any{"id": is.TrackerID, "name": Trackers[is.TrackerID]},
		"status":        map[string]any{"id": is.StatusID, "name": statusName(is.StatusID), "is_closed": is.Closed},
		"priority":      map[string]any{"id": is.PriorityID, "name": Priorities[is.PriorityID]},
		"subject":       is.Subject,
		"description":   is.Description,
		"custom_fields": cfs,
	}
	if is.AssigneeID != 0 {
		m["assigned_to"] = map[string]any{"id": is.AssigneeID, "name": Users[is.AssigneeID]}
	}
	return m
}

func statusName(id int) string {
	for _, s := range Statuses {
		if s.ID == id {
			return s.Name
		}
	}
	return ""
}

// AddIssue files an open issue in the first project, as a user would, and
// returns its id.
func (f *Fake) AddIssue(subject string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.projects[0]
	is := Issue{ID: int64(len(f.issues) + 1), Project: p.Identifier, Subject: subject, TrackerID: p.Trackers[0],
		PriorityID: DefaultPriority, StatusID: 1, Custom: map[int]string{}}
	f.issues = append(f.issues, is)
	return is.ID
}

// AddNotes adds n notes by someone else to issue id.
func (f *Fake) AddNotes(id int64, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.find(id)
	for i := range n {
		f.journals++
		is.Journals = append(is.Journals, Journal{ID: f.journals, Notes: fmt.Sprintf("note %d by someone else", i+1)})
	}
}

// NotesOf returns the notes of issue id's journals that have one, oldest
// first.
func (f *Fake) NotesOf(id int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	if is := f.find(id); is != nil {
		for _, j := range is.Journals {
			if j.Notes != "" {
				out = append(out, j.Notes)
			}
		}
	}
	return out
}

// Issue returns a copy of issue id (false: none).
func (f *Fake) Issue(id int64) (Issue, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if is := f.find(id); is != nil {
		c := *is
		c.Journals = slices.Clone(is.Journals)
		return c, true
	}
	return Issue{}, false
}

// SetWorkflow sets whether the workflow lets the API user change an
// issue's status (true until set): Redmine ignores a change it does not
// allow, without an error.
func (f *Fake) SetWorkflow(statusChanges bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noStatus = !statusChanges
}

func (f *Fake) find(id int64) *Issue {
	for i := range f.issues {
		if f.issues[i].ID == id {
			return &f.issues[i]
		}
	}
	return nil
}

// issueOf reads the {id} of /issues/{id}.json; nil (after a 404) if no
// such issue.
func (f *Fake) issueOf(w http.ResponseWriter, r *http.Request) *Issue {
	s, ok := strings.CutSuffix(r.PathValue("id"), ".json")
	n, err := strconv.ParseInt(s, 10, 64)
	var is *Issue
	if ok && err == nil {
		is = f.find(n)
	}
	if is == nil {
		w.WriteHeader(http.StatusNotFound)
	}
	return is
}

func (f *Fake) show(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	m := f.render(*is)
	if slices.Contains(strings.Split(r.URL.Query().Get("include"), ","), "journals") {
		js := []map[string]any{}
		for _, j := range is.Journals {
			js = append(js, map[string]any{"id": j.ID, "user": map[string]any{"id": 1, "name": Users[1]}, "notes": j.Notes,
				"private_notes": false, "details": []any{}})
		}
		m["journals"] = js
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"issue": m})
}

func (f *Fake) update(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var in struct {
		Issue struct {
			Notes        string          `json:"notes"`
			StatusID     json.RawMessage `json:"status_id"`
			PriorityID   json.RawMessage `json:"priority_id"`
			AssignedToID json.RawMessage `json:"assigned_to_id"`
		} `json:"issue"`
	}
	if json.Unmarshal(body, &in) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	next := *is
	var errs []string
	if st, ok := id(in.Issue.StatusID); ok && !f.noStatus {
		closed, known := statusClosed(st)
		if !known {
			errs = append(errs, "Status is not included in the list")
		}
		next.StatusID, next.Closed = st, closed
	}
	if pr, ok := id(in.Issue.PriorityID); ok {
		if Priorities[pr] == "" {
			errs = append(errs, "Priority cannot be blank")
		}
		next.PriorityID = pr
	}
	if len(in.Issue.AssignedToID) > 0 {
		var s string
		if json.Unmarshal(in.Issue.AssignedToID, &s) == nil && s == "" || string(in.Issue.AssignedToID) == "null" {
			next.AssigneeID = 0
		} else if u, _ := id(in.Issue.AssignedToID); Users[u] != "" {
			next.AssigneeID = u
		} else {
			errs = append(errs, "Assignee is invalid")
		}
	}
	if len(errs) > 0 {
		downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"errors": errs})
		return
	}
	changed := next.StatusID != is.StatusID || next.PriorityID != is.PriorityID || next.AssigneeID != is.AssigneeID
	if in.Issue.Notes != "" || changed {
		f.journals++
		next.Journals = append(slices.Clone(is.Journals), Journal{ID: f.journals, Notes: in.Issue.Notes})
	}
	*is = next
	w.WriteHeader(http.StatusNoContent)
}
