// Package jiratest is an httptest fake of the Jira Cloud REST API v3 issue
// endpoints, keeping its documented contract:
//   - basic auth with email:api_token, else 401
//   - POST /rest/api/3/issue → 201 {"id","key","self"}; invalid fields → 400
//     {"errorMessages":[],"errors":{"field":"message"}} (unknown project or
//     issue type, blank or over-long summary, a description that is not an
//     Atlassian Document, a label with a space)
//   - POST /rest/api/3/search/jql is eventually consistent: an issue becomes
//     visible to search Lag after it was created (injectable clock); the
//     fake understands `project = "P" AND labels = "L"` queries
package jiratest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/downstream/downstreamtest"
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
}

// Fake is one Jira site.
type Fake struct {
	Faults downstreamtest.Faults
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
	if err := json.Unmarshal(body, &in); err != nil {
		errs(w, http.StatusBadRequest, nil, "Unexpected character in the request body")
		return
	}
	fl := in.Fields
	bad := map[string]string{}
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
		Type: fl.IssueType.Name, Summary: fl.Summary, Labels: fl.Labels, Desc: desc, CreatedAt: f.now()}
	f.issues = append(f.issues, is)
	downstreamtest.WriteJSON(w, http.StatusCreated, map[string]string{"id": is.ID, "key": is.Key, "self": f.srv + "/rest/api/3/issue/" + is.ID})
}

var (
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
