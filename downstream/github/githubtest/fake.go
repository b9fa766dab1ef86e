// Package githubtest is an httptest fake of the GitHub REST API's issue
// endpoints, keeping its documented contract:
//   - Authorization: "Bearer <token>" (or "token <token>"), else 401
//     {"message":"Bad credentials"}
//   - POST /repos/{owner}/{repo}/issues → 201 issue; a blank title → 422
//     "Validation Failed" (missing_field title); labels are kept only for a
//     token with push access, silently dropped otherwise; unknown labels
//     are created
//   - GET /repos/{owner}/{repo}/issues?labels=a,b&state=open|closed|all is
//     read-after-write and includes pull requests (they carry "pull_request")
//   - rate limits: 403 with x-ratelimit-remaining 0 and x-ratelimit-reset
//     (primary) or 403 "You have exceeded a secondary rate limit" with
//     retry-after (secondary)
package githubtest

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
	"time"

	"ticketrelay/downstream/downstreamtest"
)

// Issue is a stored issue or pull request.
type Issue struct {
	Number int64
	Title  string
	Body   string
	Labels []string
	State  string
	PR     bool
}

// Limit is a rate-limit answer for the next create request.
type Limit int

const (
	Primary   Limit = iota + 1 // 403, x-ratelimit-remaining: 0, reset in ResetIn
	Secondary                  // 403, secondary rate limit message, retry-after RetryAfter
)

// Fake is one repository.
type Fake struct {
	Faults      downstreamtest.Faults
	owner, repo string
	token       string
	srv         string
	// PushAccess: the token may set labels (default true).
	PushAccess bool
	// ResetIn and RetryAfter shape rate-limit answers.
	ResetIn    time.Duration
	RetryAfter time.Duration

	mu     sync.Mutex
	issues []Issue
	limits []Limit
}

// New starts a repository owner/repo that accepts token.
func New(t testing.TB, owner, repo, token string) *Fake {
	f := &Fake{owner: owner, repo: repo, token: token, PushAccess: true, ResetIn: 42 * time.Second, RetryAfter: 61 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues", func(w http.ResponseWriter, r *http.Request) {
		f.Faults.Serve(w, r, f.check(f.create))
	})
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues", f.check(f.list))
	f.srv = downstreamtest.StartServer(t, mux).URL
	return f
}

// URL is the API base URL.
func (f *Fake) URL() string { return f.srv }

// Count is the number of issues (not pull requests).
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, is := range f.issues {
		if !is.PR {
			n++
		}
	}
	return n
}

// Issues returns a copy of the issues and pull requests.
func (f *Fake) Issues() []Issue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.issues)
}

// AddPullRequest adds a pull request with labels (it shows in the issues list).
func (f *Fake) AddPullRequest(title string, labels ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issues = append(f.issues, Issue{Number: int64(len(f.issues) + 1), Title: title, Labels: labels, State: "open", PR: true})
}

// LimitNext makes the next create request hit a rate limit.
func (f *Fake) LimitNext(l Limit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits = append(f.limits, l)
}

func msg(w http.ResponseWriter, status int, m string) {
	downstreamtest.WriteJSON(w, status, map[string]string{"message": m, "documentation_url": "https://docs.github.com/rest", "status": strconv.Itoa(status)})
}

func (f *Fake) check(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		if a != "Bearer "+f.token && a != "token "+f.token {
			msg(w, http.StatusUnauthorized, "Bad credentials")
			return
		}
		if r.Header.Get("User-Agent") == "" {
			msg(w, http.StatusForbidden, "Request forbidden by administrative rules. Please make sure your request has a User-Agent header")
			return
		}
		if r.PathValue("owner") != f.owner || r.PathValue("repo") != f.repo {
			msg(w, http.StatusNotFound, "Not Found")
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.limits) > 0 {
		l := f.limits[0]
		f.limits = f.limits[1:]
		if l == Primary {
			w.Header().Set("x-ratelimit-remaining", "0")
			w.Header().Set("x-ratelimit-reset", strconv.FormatInt(time.Now().Add(f.ResetIn).Unix(), 10))
			msg(w, http.StatusForbidden, "API rate limit exceeded for user ID 1.")
		} else {
			w.Header().Set("retry-after", strconv.Itoa(int(f.RetryAfter/time.Second)))
			msg(w, http.StatusForbidden, "You have exceeded a secondary rate limit and have been temporarily blocked from content creation. Please retry your request again later.")
		}
		return
	}
	var in struct {
		Title  *string  `json:"title"`
		Body   string   `json:"body"`
		Labels []string `json:"labels"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		msg(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if in.Title == nil || strings.TrimSpace(*in.Title) == "" {
		downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest/issues/issues#create-an-issue", "status": "422",
			"errors": []map[string]string{{"resource": "Issue", "code": "missing_field", "field": "title"}},
		})
		return
	}
	for _, l := range in.Labels {
		if len([]rune(l)) > 50 {
			downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
				"message": "Validation Failed", "status": "422",
				"errors": []map[string]string{{"resource": "Label", "code": "invalid", "field": "name"}},
			})
			return
		}
	}
	is := Issue{Number: int64(len(f.issues) + 1), Title: *in.Title, Body: in.Body, State: "open"}
	if f.PushAccess {
		is.Labels = in.Labels
	}
	f.issues = append(f.issues, is)
	w.Header().Set("Location", f.apiURL(is))
	downstreamtest.WriteJSON(w, http.StatusCreated, f.render(is))
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	var want []string
	if l := q.Get("labels"); l != "" {
		want = strings.Split(l, ",")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []map[string]any{}
	for _, is := range f.issues {
		if state != "all" && is.State != state {
			continue
		}
		ok := true
		for _, l := range want {
			ok = ok && slices.Contains(is.Labels, l)
		}
		if ok {
			out = append(out, f.render(is))
		}
	}
	downstreamtest.WriteJSON(w, http.StatusOK, out)
}

func (f *Fake) apiURL(is Issue) string {
	return fmt.Sprintf("%s/repos/%s/%s/issues/%d", f.srv, f.owner, f.repo, is.Number)
}

func (f *Fake) render(is Issue) map[string]any {
	labels := []map[string]string{}
	for _, l := range is.Labels {
		labels = append(labels, map[string]string{"name": l})
	}
	m := map[string]any{
		"id": 1000 + is.Number, "number": is.Number, "title": is.Title, "body": is.Body, "state": is.State, "labels": labels,
		"url": f.apiURL(is), "html_url": fmt.Sprintf("https://github.example/%s/%s/issues/%d", f.owner, f.repo, is.Number),
	}
	if is.PR {
		m["pull_request"] = map[string]string{"url": f.apiURL(is)}
	}
	return m
}
