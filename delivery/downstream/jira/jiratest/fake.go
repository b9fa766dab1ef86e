// Package jiratest is an httptest fake of the Jira Cloud REST API v3 issue
// endpoints, keeping its documented contract:
//   - basic auth with email:api_token, else 401
//   - POST /rest/api/3/issue → 201 {"id","key","self"}; invalid fields → 400
//     {"errorMessages":[],"errors":{"field":"message"}} (unknown project or
//     issue type, blank or over-long summary, a description that is not an
//     Atlassian Document, a label with a space)
//   - fields beyond those: components by name or id (Components, else 400
//     "Component name 'X' is not valid"), assignee {accountId} (Users),
//     custom fields on the screen (CustomFields, else 400 "Field 'X'
//     cannot be set. It is not on the appropriate screen, or unknown.");
//     kept in Issue.Extra
//   - POST /rest/api/3/search/jql is eventually consistent: an issue becomes
//     visible to search Lag after it was created (injectable clock); the
//     fake understands `project = "P" AND labels = "L"` queries
//   - GET /rest/api/3/issue/{key}?fields=… → 200 {"id","key","fields":
//     {status {name, statusCategory {key: new|indeterminate|done}},
//     priority {name}, labels, assignee {accountId} or null}}; an unknown
//     issue → 404 "Issue does not exist or you do not have permission to
//     see it."
//   - PUT /rest/api/3/issue/{key} {"fields":{priority {name}, labels,
//     assignee {accountId} | null}} → 204; an unknown priority → 400
//     errors.priority, a user who cannot be assigned → 400 errors.assignee
//   - GET /rest/api/3/issue/{key}/transitions → the workflow's transitions
//     (To Do, In Progress, Done) with their target's status category;
//     POST …/transitions {"transition":{"id"}} → 204, an unknown id → 400
//   - POST /rest/api/3/issue/{key}/comment {"body": Atlassian Document} →
//     201 {"id","self","body"}; a body that is not one → 400
//     (CommentFaults inject faults here)
//   - GET /rest/api/3/issue/{key}/comment?startAt=&maxResults=&orderBy=
//     → {"startAt","maxResults","total","comments"}, oldest first, at most
//     100 a page (MaxComments); read-after-write (no index between)
package jiratest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream/downstreamtest"
)

// Issue is a stored issue.
type Issue struct {
	ID, Key   string
	Project   string
	Type      string
	Summary   string
	Labels    []string
	Desc      map[string]any
	CreatedAt time.Time
	Extra     map[string]json.RawMessage // the other fields the create set
	Status    string                     // a name of Statuses
	Priority  string
	Assignee  string // an account id, "" none
	Comments  []Comment
}

// Comment is one comment of an issue.
type Comment struct {
	ID   string
	Body map[string]any // the Atlassian Document
}

// Text is the comment's text: its paragraphs' text, a blank line between.
func (c Comment) Text() string {
	var paras []string
	content, _ := c.Body["content"].([]any)
	for _, p := range content {
		pm, _ := p.(map[string]any)
		nodes, _ := pm["content"].([]any)
		var b strings.Builder
		for _, n := range nodes {
			nm, _ := n.(map[string]any)
			if txt, ok := nm["text"].(string); ok {
				b.WriteString(txt)
			} else if nm["type"] == "hardBreak" {
				b.WriteString("\n")
			}
		}
		paras = append(paras, b.String())
	}
	return strings.Join(paras, "\n\n")
}

// Statuses are the workflow's statuses and their categories.
var Statuses = map[string]string{"To Do": "new", "In Progress": "indeterminate", "Done": "done"}

// Transitions are the workflow's transitions (id → target status),
// available from every status.
var Transitions = []struct{ ID, To string }{{"11", "To Do"}, {"21", "In Progress"}, {"31", "Done"}}

// Priorities are Jira's default priority scheme; DefaultPriority the
// scheme's default.
var (
	Priorities      = []string{"Highest", "High", "Medium", "Low", "Lowest"}
	DefaultPriority = "Medium"
)

// Users are the account ids issues may be assigned to.
var Users = []string{"5b10a2844c20165700ede21g", "557058:f58131cb-b67d-43c7-b30d-6b58d40bd077"}

// Components are the project's components; CustomFields the custom
// fields on its create screen.
var (
	Components   = []string{"Backend", "Frontend"}
	CustomFields = []string{"customfield_10010"}
)

// MaxComments is the most comments the fake lists on one page.
const MaxComments = 100

// Fake is one Jira site.
type Fake struct {
	Faults        downstreamtest.Faults // of creates
	CommentFaults downstreamtest.Faults // of POST …/comment
	// Lag is how long a new issue stays invisible to search.
	Lag   time.Duration
	email string
	token string
	now   func() time.Time
	srv   string

	mu       sync.Mutex
	projects []string
	types    []string
	issues   []Issue
	comments int // the last comment id
}

// New starts a site with one project and the issue types Task and Bug;
// searches see an issue lag after its creation; now is the clock (nil:
// time.Now).
func New(t testing.TB, email, token, project string, lag time.Duration, now func() time.Time) *Fake {
	if now == nil {
		now = time.Now
	}
	f := &Fake{Lag: lag, email: email, token: token, now: now, projects: []string{project}, types: []string{"Task", "Bug"}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /rest/api/3/issue", func(w http.ResponseWriter, r *http.Request) { f.Faults.Serve(w, r, f.auth(f.create)) })
	mux.HandleFunc("POST /rest/api/3/search/jql", f.auth(f.search))
	mux.HandleFunc("GET /rest/api/3/issue/{key}", f.auth(f.getIssue))
	mux.HandleFunc("PUT /rest/api/3/issue/{key}", f.auth(f.editIssue))
	mux.HandleFunc("GET /rest/api/3/issue/{key}/transitions", f.auth(f.transitions))
	mux.HandleFunc("POST /rest/api/3/issue/{key}/transitions", f.auth(f.transition))
	mux.HandleFunc("GET /rest/api/3/issue/{key}/comment", f.auth(f.listComments))
	mux.HandleFunc("POST /rest/api/3/issue/{key}/comment", func(w http.ResponseWriter, r *http.Request) {
		f.CommentFaults.Serve(w, r, f.auth(f.addComment))
	})
	mux.HandleFunc("/rest/api/3/search", func(w http.ResponseWriter, r *http.Request) {
		errs(w, http.StatusGone, nil, "The requested API has been removed. Please migrate to the /rest/api/3/search/jql API.")
	})
	f.srv = downstreamtest.StartServer(t, mux).URL
	return f
}

// URL is the site's base URL.
func (f *Fake) URL() string { return f.srv }

// Count is the number of issues created.
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

func errs(w http.ResponseWriter, status int, fields map[string]string, messages ...string) {
	if fields == nil {
		fields = map[string]string{}
	}
	if messages == nil {
		messages = []string{}
	}
	downstreamtest.WriteJSON(w, status, map[string]any{"errorMessages": messages, "errors": fields})
}

func (f *Fake) auth(h http.HandlerFunc) http.HandlerFunc {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(f.email+":"+f.token))
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			errs(w, http.StatusUnauthorized, nil, "Client must be authenticated to access this resource.")
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
	var in struct {
		Fields struct {
			Project     struct{ Key string }  `json:"project"`
			IssueType   struct{ Name string } `json:"issuetype"`
			Summary     string                `json:"summary"`
			Labels      []string              `json:"labels"`
			Description json.RawMessage       `json:"description"`
		} `json:"fields"`
	}
	var raw struct {
		Fields map[string]json.RawMessage `json:"fields"`
	}
	if err := json.Unmarshal(body, &in); err != nil || json.Unmarshal(body, &raw) != nil {
		errs(w, http.StatusBadRequest, nil, "Unexpected character in the request body")
		return
	}
	fl := in.Fields
	bad := map[string]string{}
	extra := map[string]json.RawMessage{}
	for name, v := range raw.Fields {
		switch name {
		case "project", "issuetype", "summary", "labels", "description":
			continue
		case "components":
			var cs []struct{ Name, ID string }
			if json.Unmarshal(v, &cs) != nil {
				bad[name] = "Operation value must be an array"
			}
			for _, c := range cs {
				if !slices.Contains(Components, c.Name) && c.ID == "" {
					bad[name] = fmt.Sprintf("Component name '%s' is not valid", c.Name)
				}
			}
		case "assignee", "reporter":
			var a struct{ AccountID string }
			if json.Unmarshal(v, &a) != nil || !slices.Contains(Users, a.AccountID) {
				bad[name] = fmt.Sprintf("User '%s' cannot be assigned issues.", a.AccountID)
			}
		case "duedate":
			var d string
			if json.Unmarshal(v, &d) != nil || !dateRE.MatchString(d) {
				bad[name] = "Error parsing date string: " + string(v)
			}
		case "parent":
			var p struct{ Key, ID string }
			if json.Unmarshal(v, &p) != nil || p.Key == "" && p.ID == "" {
				bad[name] = "Could not find issue by id or key."
			}
		default:
			if !slices.Contains(CustomFields, name) {
				bad[name] = fmt.Sprintf("Field '%s' cannot be set. It is not on the appropriate screen, or unknown.", name)
			}
		}
		extra[name] = v
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.projects, fl.Project.Key) {
		bad["project"] = "valid project is required"
	}
	if !slices.Contains(f.types, fl.IssueType.Name) {
		bad["issuetype"] = "valid issue type is required"
	}
	switch n := len([]rune(fl.Summary)); {
	case strings.TrimSpace(fl.Summary) == "":
		bad["summary"] = "You must specify a summary of the issue."
	case n > 255:
		bad["summary"] = "Summary must be less than 255 characters."
	}
	var desc map[string]any
	if len(fl.Description) > 0 && string(fl.Description) != "null" {
		if json.Unmarshal(fl.Description, &desc) != nil || desc["type"] != "doc" {
			bad["description"] = "Operation value must be an Atlassian Document (see the Atlassian Document Format)"
		}
	}
	for _, l := range fl.Labels {
		if strings.ContainsAny(l, " \t") {
			bad["labels"] = fmt.Sprintf("The label '%s' contains spaces which is invalid.", l)
		}
	}
	if len(bad) > 0 {
		errs(w, http.StatusBadRequest, bad)
		return
	}
	n := len(f.issues) + 1
	is := Issue{ID: fmt.Sprint(10000 + n), Key: fmt.Sprintf("%s-%d", fl.Project.Key, n), Project: fl.Project.Key,
		Type: fl.IssueType.Name, Summary: fl.Summary, Labels: fl.Labels, Desc: desc, CreatedAt: f.now(), Status: "To Do", Priority: DefaultPriority,
		Extra: extra}
	f.issues = append(f.issues, is)
	downstreamtest.WriteJSON(w, http.StatusCreated, map[string]string{"id": is.ID, "key": is.Key, "self": f.srv + "/rest/api/3/issue/" + is.ID})
}

var (
	dateRE    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	labelRE   = regexp.MustCompile(`\blabels\s*=\s*"([^"]+)"`)
	projectRE = regexp.MustCompile(`\bproject\s*=\s*"([^"]+)"`)
)

func (f *Fake) search(w http.ResponseWriter, r *http.Request) {
	var in struct {
		JQL        string `json:"jql"`
		MaxResults int    `json:"maxResults"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.JQL == "" {
		errs(w, http.StatusBadRequest, nil, "The JQL query is missing.")
		return
	}
	lm := labelRE.FindStringSubmatch(in.JQL)
	if lm == nil {
		errs(w, http.StatusBadRequest, nil, "Error in the JQL Query: this fake understands labels = \"...\" queries only.")
		return
	}
	pm := projectRE.FindStringSubmatch(in.JQL)
	if in.MaxResults <= 0 {
		in.MaxResults = 50
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	out := []map[string]string{}
	for _, is := range f.issues {
		if now.Sub(is.CreatedAt) < f.Lag { // not indexed yet
			continue
		}
		if pm != nil && is.Project != pm[1] || !slices.Contains(is.Labels, lm[1]) {
			continue
		}
		if len(out) < in.MaxResults {
			out = append(out, map[string]string{"id": is.ID, "key": is.Key, "self": f.srv + "/rest/api/3/issue/" + is.ID})
		}
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"issues": out, "isLast": true})
}

// AddIssue files an issue in the project as a user would, and returns its
// key.
func (f *Fake) AddIssue(summary string, labels ...string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.issues) + 1
	is := Issue{ID: fmt.Sprint(10000 + n), Key: fmt.Sprintf("%s-%d", f.projects[0], n), Project: f.projects[0], Type: f.types[0],
		Summary: summary, Labels: labels, CreatedAt: f.now(), Status: "To Do", Priority: DefaultPriority}
	f.issues = append(f.issues, is)
	return is.Key
}

// AddComments adds n comments by someone else to issue key.
func (f *Fake) AddComments(key string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(key)
	for i := range n {
		f.comments++
		is.Comments = append(is.Comments, Comment{ID: strconv.Itoa(f.comments), Body: map[string]any{"type": "doc", "version": 1,
			"content": []any{map[string]any{"type": "paragraph", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("comment %d", i+1)}}}}}})
	}
}

// Issue returns a copy of issue key (false: none).
func (f *Fake) Issue(key string) (Issue, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(key)
	if is == nil {
		return Issue{}, false
	}
	c := *is
	c.Labels, c.Comments = slices.Clone(is.Labels), slices.Clone(is.Comments)
	return c, true
}

func (f *Fake) issue(key string) *Issue {
	for i := range f.issues {
		if f.issues[i].Key == key || f.issues[i].ID == key {
			return &f.issues[i]
		}
	}
	return nil
}

// issueOf reads {key}; nil (after a 404) if no such issue.
func (f *Fake) issueOf(w http.ResponseWriter, r *http.Request) *Issue {
	is := f.issue(r.PathValue("key"))
	if is == nil {
		errs(w, http.StatusNotFound, nil, "Issue does not exist or you do not have permission to see it.")
	}
	return is
}

func (f *Fake) getIssue(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	var assignee any
	if is.Assignee != "" {
		assignee = map[string]string{"accountId": is.Assignee}
	}
	labels := is.Labels
	if labels == nil {
		labels = []string{}
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"id": is.ID, "key": is.Key, "fields": map[string]any{
		"status":   map[string]any{"name": is.Status, "statusCategory": map[string]string{"key": Statuses[is.Status]}},
		"priority": map[string]string{"name": is.Priority},
		"labels":   labels,
		"assignee": assignee,
	}})
}

func (f *Fake) editIssue(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Fields map[string]json.RawMessage `json:"fields"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		errs(w, http.StatusBadRequest, nil, "Unexpected character in the request body")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	next := *is
	bad := map[string]string{}
	for name, raw := range in.Fields {
		switch name {
		case "priority":
			var p struct{ Name string }
			if json.Unmarshal(raw, &p) != nil || !slices.Contains(Priorities, p.Name) {
				bad[name] = "Specify a valid 'name' for Priority"
			}
			next.Priority = p.Name
		case "labels":
			var ls []string
			if json.Unmarshal(raw, &ls) != nil || slices.ContainsFunc(ls, func(l string) bool { return strings.ContainsAny(l, " \t") }) {
				bad[name] = "The label contains spaces which is invalid."
			}
			next.Labels = ls
		case "assignee":
			var a *struct{ AccountID string }
			if json.Unmarshal(raw, &a) != nil {
				bad[name] = "Specify a valid value for assignee"
			} else if a == nil {
				next.Assignee = ""
			} else if !slices.Contains(Users, a.AccountID) {
				bad[name] = fmt.Sprintf("User '%s' cannot be assigned issues.", a.AccountID)
			} else {
				next.Assignee = a.AccountID
			}
		default:
			bad[name] = fmt.Sprintf("Field '%s' cannot be set. It is not on the appropriate screen, or unknown.", name)
		}
	}
	if len(bad) > 0 {
		errs(w, http.StatusBadRequest, bad)
		return
	}
	*is = next
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) transitions(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.issueOf(w, r) == nil {
		return
	}
	out := []map[string]any{}
	for _, tr := range Transitions {
		out = append(out, map[string]any{"id": tr.ID, "name": tr.To,
			"to": map[string]any{"name": tr.To, "statusCategory": map[string]string{"key": Statuses[tr.To]}}})
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"transitions": out})
}

func (f *Fake) transition(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Transition struct{ ID string } `json:"transition"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		errs(w, http.StatusBadRequest, nil, "Unexpected character in the request body")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	for _, tr := range Transitions {
		if tr.ID == in.Transition.ID {
			is.Status = tr.To
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	errs(w, http.StatusBadRequest, nil, "Transition id '"+in.Transition.ID+"' is not valid for this issue.")
}

func (f *Fake) addComment(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Body map[string]any `json:"body"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		errs(w, http.StatusBadRequest, nil, "Unexpected character in the request body")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	if in.Body["type"] != "doc" {
		errs(w, http.StatusBadRequest, map[string]string{"comment": "Comment body is not a valid Atlassian Document"})
		return
	}
	f.comments++
	c := Comment{ID: strconv.Itoa(f.comments), Body: in.Body}
	is.Comments = append(is.Comments, c)
	downstreamtest.WriteJSON(w, http.StatusCreated, f.renderComment(is, c))
}

func (f *Fake) renderComment(is *Issue, c Comment) map[string]any {
	return map[string]any{"id": c.ID, "self": f.srv + "/rest/api/3/issue/" + is.ID + "/comment/" + c.ID, "body": c.Body}
}

func (f *Fake) listComments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	start, _ := strconv.Atoi(q.Get("startAt"))
	limit, err := strconv.Atoi(q.Get("maxResults"))
	if err != nil || limit <= 0 || limit > MaxComments {
		limit = MaxComments
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	cs := is.Comments
	if q.Get("orderBy") == "-created" {
		cs = slices.Clone(cs)
		slices.Reverse(cs)
	}
	out := []map[string]any{}
	for _, c := range cs[min(max(start, 0), len(cs)):min(max(start, 0)+limit, len(cs))] {
		out = append(out, f.renderComment(is, c))
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{"startAt": start, "maxResults": limit, "total": len(cs), "comments": out})
}
