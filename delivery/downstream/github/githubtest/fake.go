// Package githubtest is an httptest fake of the GitHub REST API's issue
// endpoints, keeping its documented contract:
//   - Authorization: "Bearer <token>" (or "token <token>"), else 401
//     {"message":"Bad credentials"}
//   - GET /repos/{owner}/{repo} → 200 repository; for a user's token it
//     carries "permissions" {admin, maintain, push, triage, pull} (push
//     follows PushAccess, triage follows PushAccess or Triage); for a
//     GitHub App installation token (Installation) it carries none
//   - GET /installation/repositories → 200 for an installation token, else
//     403 "You must authenticate with an installation access token in order
//     to list repositories for an installation."
//   - POST /repos/{owner}/{repo}/issues → 201 issue; 410 "Issues are
//     disabled for this repo" (IssuesDisabled); 422 "Validation Failed" for
//     a blank title (missing_field title), a title of more than 256
//     characters ("title is too long (maximum is 256 characters)"), a body
//     of more than 65536 characters and a label name of more than 50
//     characters; labels are kept only when PushAccess is set (a user with
//     push access, an installation with issues write), silently dropped
//     otherwise; unknown labels are created; assignees, milestone (a
//     number of Milestones) and type (one of IssueTypes) likewise, an
//     unassignable login, unknown milestone or type → 422 Validation Failed
//   - GET /repos/{owner}/{repo}/issues?labels=a,b&state=open|closed|all is
//     read-after-write and includes pull requests (they carry "pull_request")
//   - rate limits on create (LimitNext), with status LimitStatus (403, or
//     429; both are documented): primary (x-ratelimit-remaining 0 and
//     x-ratelimit-reset), secondary ("You have exceeded a secondary rate
//     limit", retry-after when RetryAfter > 0), the older abuse-detection
//     message, and 422 "was submitted too quickly"
//   - GET /repos/{owner}/{repo}/issues/{n} → 200 issue (state, labels,
//     assignees); an unknown issue → 404 {"message":"Not Found"}
//   - POST /repos/{owner}/{repo}/issues/{n}/comments {"body"} → 201
//     comment {id, html_url, body}; a missing or blank body → 422
//     missing_field body, one of more than 65536 characters → 422; an
//     unknown issue → 404; a locked issue → 403 (CommentFaults inject
//     faults here)
//   - GET /repos/{owner}/{repo}/issues/{n}/comments?per_page=&page= →
//     comments in ascending id order, per_page default 30 and at most
//     100, with a Link header (rel="next", rel="last") while pages remain;
//     read-after-write
//   - PATCH /repos/{owner}/{repo}/issues/{n} {state, state_reason, labels,
//     assignees} → 200 issue; labels and assignees replace the sets and are
//     silently dropped without PushAccess; an assignee who cannot be
//     assigned (not in Assignable) → 422 Validation Failed (assignees
//     invalid); a state other than open or closed → 422
//   - pages (html_url) are under the API base URL, as a GitHub
//     Enterprise Server's are under its host
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
	"unicode/utf8"

	"ticketrelay/delivery/downstream/downstreamtest"
)

// Issue is a stored issue or pull request.
type Issue struct {
	Number int64
	Title  string
	Body   string
	Labels []string
	State  string
	PR     bool
	// Assignees are logins; Comments are oldest first.
	Assignees []string
	Comments  []Comment
	Locked    bool
	// Milestone (its number, 0: none) and Type (the issue type's name)
	// as a create set them.
	Milestone int64
	Type      string
}

// Milestones are the repository's open milestones, by number; IssueTypes
// the organization's issue types.
var (
	Milestones = []int64{1, 2}
	IssueTypes = []string{"Bug", "Task", "Feature"}
)

// Comment is one comment of an issue.
type Comment struct {
	ID   int64
	Body string
}

// Limit is a rate-limit answer for the next create request.
type Limit int

const (
	Primary    Limit = iota + 1 // x-ratelimit-remaining: 0, reset in ResetIn
	Secondary                   // secondary rate limit message, retry-after RetryAfter (none if 0)
	Abuse                       // the older abuse-detection message, retry-after RetryAfter (none if 0)
	TooQuickly                  // 422 Validation Failed: "was submitted too quickly"
)

// Fake is one repository.
type Fake struct {
	// Faults applies to create requests; RepoFaults to GET /repos/{owner}/{repo}.
	Faults     downstreamtest.Faults
	RepoFaults downstreamtest.Faults
	// CommentFaults applies to POST …/issues/{n}/comments.
	CommentFaults downstreamtest.Faults
	// Assignable are the logins an issue may be assigned to.
	Assignable  []string
	owner, repo string
	token       string
	srv         string
	// PushAccess: the token may set labels on a new issue (default true).
	PushAccess bool
	// Triage: the token's user has the triage role (labels on existing
	// issues) without push access.
	Triage bool
	// Installation: the token is a GitHub App installation token.
	Installation bool
	// IssuesDisabled: the repository has issues turned off (410 on create).
	IssuesDisabled bool
	// ResetIn and RetryAfter shape rate-limit answers; LimitStatus is their
	// status (default 403).
	ResetIn     time.Duration
	RetryAfter  time.Duration
	LimitStatus int

	mu        sync.Mutex
	issues    []Issue
	limits    []Limit
	repoCalls int
	comments  int64 // the last comment id
}

// New starts a repository owner/repo that accepts token.
func New(t testing.TB, owner, repo, token string) *Fake {
	f := &Fake{owner: owner, repo: repo, token: token, PushAccess: true, ResetIn: 42 * time.Second, RetryAfter: 61 * time.Second,
		LimitStatus: http.StatusForbidden, Assignable: []string{"octocat", "hubot"}, comments: 900}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues", func(w http.ResponseWriter, r *http.Request) {
		f.Faults.Serve(w, r, f.check(f.create))
	})
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues", f.check(f.list))
	mux.HandleFunc("GET /repos/{owner}/{repo}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.repoCalls++
		f.mu.Unlock()
		f.RepoFaults.Serve(w, r, f.check(f.getRepo))
	})
	mux.HandleFunc("GET /installation/repositories", f.auth(f.installationRepos))
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues/{number}", f.check(f.getIssue))
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/issues/{number}", f.check(f.patchIssue))
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues/{number}/comments", f.check(f.listComments))
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/comments", func(w http.ResponseWriter, r *http.Request) {
		f.CommentFaults.Serve(w, r, f.check(f.addComment))
	})
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

// RepoCalls is the number of GET /repos/{owner}/{repo} requests received.
func (f *Fake) RepoCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.repoCalls
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

// invalid answers 422 Validation Failed with one error.
func invalid(w http.ResponseWriter, e map[string]string) {
	downstreamtest.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest/issues/issues#create-an-issue", "status": "422",
		"errors": []map[string]string{e},
	})
}

func (f *Fake) auth(h http.HandlerFunc) http.HandlerFunc {
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
		h(w, r)
	}
}

func (f *Fake) check(h http.HandlerFunc) http.HandlerFunc {
	return f.auth(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("owner") != f.owner || r.PathValue("repo") != f.repo {
			msg(w, http.StatusNotFound, "Not Found")
			return
		}
		h(w, r)
	})
}

func (f *Fake) repository() map[string]any {
	return map[string]any{
		"id": 4242, "name": f.repo, "full_name": f.owner + "/" + f.repo, "private": true, "has_issues": !f.IssuesDisabled,
		"owner":    map[string]any{"login": f.owner},
		"html_url": fmt.Sprintf("%s/%s/%s", f.srv, f.owner, f.repo),
		"url":      fmt.Sprintf("%s/repos/%s/%s", f.srv, f.owner, f.repo),
	}
}

func (f *Fake) getRepo(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.repository()
	if !f.Installation {
		m["permissions"] = map[string]bool{"admin": false, "maintain": false, "push": f.PushAccess, "triage": f.PushAccess || f.Triage, "pull": true}
	}
	downstreamtest.WriteJSON(w, http.StatusOK, m)
}

func (f *Fake) installationRepos(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.Installation {
		msg(w, http.StatusForbidden, "You must authenticate with an installation access token in order to list repositories for an installation.")
		return
	}
	downstreamtest.WriteJSON(w, http.StatusOK, map[string]any{
		"total_count": 1, "repository_selection": "selected", "repositories": []map[string]any{f.repository()},
	})
}

func (f *Fake) limit(w http.ResponseWriter, l Limit) {
	status := f.LimitStatus
	if status == 0 {
		status = http.StatusForbidden
	}
	retryAfter := func() {
		if f.RetryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(int(f.RetryAfter/time.Second)))
		}
	}
	switch l {
	case Primary:
		w.Header().Set("x-ratelimit-remaining", "0")
		w.Header().Set("x-ratelimit-reset", strconv.FormatInt(time.Now().Add(f.ResetIn).Unix(), 10))
		msg(w, status, "API rate limit exceeded for user ID 1.")
	case Secondary:
		retryAfter()
		msg(w, status, "You have exceeded a secondary rate limit and have been temporarily blocked from content creation. Please retry your request again later.")
	case Abuse:
		retryAfter()
		msg(w, status, "You have triggered an abuse detection mechanism and have been temporarily blocked from content creation. Please retry your request again later.")
	case TooQuickly:
		invalid(w, map[string]string{"resource": "Issue", "code": "custom", "field": "base", "message": "was submitted too quickly"})
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
		f.limit(w, l)
		return
	}
	if f.IssuesDisabled {
		msg(w, http.StatusGone, "Issues are disabled for this repo")
		return
	}
	var in struct {
		Title     *string  `json:"title"`
		Body      string   `json:"body"`
		Labels    []string `json:"labels"`
		Assignees []string `json:"assignees"`
		Milestone *int64   `json:"milestone"`
		Type      *string  `json:"type"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		msg(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	for _, a := range in.Assignees {
		if !slices.ContainsFunc(f.Assignable, func(x string) bool { return strings.EqualFold(x, a) }) {
			invalid(w, map[string]string{"resource": "Issue", "code": "invalid", "field": "assignees", "value": a})
			return
		}
	}
	if in.Milestone != nil && !slices.Contains(Milestones, *in.Milestone) {
		invalid(w, map[string]string{"resource": "Issue", "code": "invalid", "field": "milestone", "value": fmt.Sprint(*in.Milestone)})
		return
	}
	if in.Type != nil && !slices.Contains(IssueTypes, *in.Type) {
		invalid(w, map[string]string{"resource": "Issue", "code": "invalid", "field": "type", "value": *in.Type})
		return
	}
	switch {
	case in.Title == nil || strings.TrimSpace(*in.Title) == "":
		invalid(w, map[string]string{"resource": "Issue", "code": "missing_field", "field": "title"})
		return
	case utf8.RuneCountInString(*in.Title) > 256:
		invalid(w, map[string]string{"resource": "Issue", "code": "custom", "field": "title", "message": "title is too long (maximum is 256 characters)"})
		return
	case utf8.RuneCountInString(in.Body) > 65536:
		invalid(w, map[string]string{"resource": "Issue", "code": "custom", "field": "body", "message": "body is too long (maximum is 65536 characters)"})
		return
	}
	for _, l := range in.Labels {
		if utf8.RuneCountInString(l) > 50 {
			invalid(w, map[string]string{"resource": "Label", "code": "invalid", "field": "name"})
			return
		}
	}
	is := Issue{Number: int64(len(f.issues) + 1), Title: *in.Title, Body: in.Body, State: "open"}
	if f.PushAccess { // without it, GitHub silently drops what only pushers may set
		is.Labels, is.Assignees = in.Labels, in.Assignees
		if in.Milestone != nil {
			is.Milestone = *in.Milestone
		}
		if in.Type != nil {
			is.Type = *in.Type
		}
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
		"url": f.apiURL(is), "html_url": fmt.Sprintf("%s/%s/%s/issues/%d", f.srv, f.owner, f.repo, is.Number),
	}
	assignees := []map[string]string{}
	for _, a := range is.Assignees {
		assignees = append(assignees, map[string]string{"login": a})
	}
	m["assignees"] = assignees
	if is.PR {
		m["pull_request"] = map[string]string{"url": f.apiURL(is)}
	}
	return m
}

// AddIssue opens an issue as a user would (not through the API) and
// returns its number.
func (f *Fake) AddIssue(title string, labels ...string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := Issue{Number: int64(len(f.issues) + 1), Title: title, Labels: labels, State: "open"}
	f.issues = append(f.issues, is)
	return is.Number
}

// AddComments adds n comments by someone else to issue number.
func (f *Fake) AddComments(number int64, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(number)
	for i := range n {
		f.comments++
		is.Comments = append(is.Comments, Comment{ID: f.comments, Body: fmt.Sprintf("comment %d by someone else", i+1)})
	}
}

// Issue returns a copy of issue number (false: none).
func (f *Fake) Issue(number int64) (Issue, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(number)
	if is == nil {
		return Issue{}, false
	}
	c := *is
	c.Labels, c.Assignees, c.Comments = slices.Clone(is.Labels), slices.Clone(is.Assignees), slices.Clone(is.Comments)
	return c, true
}

// Lock locks issue number's conversation: comments are refused (403).
func (f *Fake) Lock(number int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issue(number).Locked = true
}

func (f *Fake) issue(number int64) *Issue {
	for i := range f.issues {
		if f.issues[i].Number == number && !f.issues[i].PR {
			return &f.issues[i]
		}
	}
	return nil
}

// issueOf reads {number}; nil (after a 404) if no such issue.
func (f *Fake) issueOf(w http.ResponseWriter, r *http.Request) *Issue {
	n, err := strconv.ParseInt(r.PathValue("number"), 10, 64)
	var is *Issue
	if err == nil {
		is = f.issue(n)
	}
	if is == nil {
		msg(w, http.StatusNotFound, "Not Found")
	}
	return is
}

func (f *Fake) getIssue(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if is := f.issueOf(w, r); is != nil {
		downstreamtest.WriteJSON(w, http.StatusOK, f.render(*is))
	}
}

func (f *Fake) renderComment(is *Issue, c Comment) map[string]any {
	return map[string]any{"id": c.ID, "body": c.Body, "user": map[string]string{"login": "ticketrelay-bot"},
		"url":      fmt.Sprintf("%s/repos/%s/%s/issues/comments/%d", f.srv, f.owner, f.repo, c.ID),
		"html_url": fmt.Sprintf("%s/%s/%s/issues/%d#issuecomment-%d", f.srv, f.owner, f.repo, is.Number, c.ID)}
}

func (f *Fake) addComment(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var in struct {
		Body *string `json:"body"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		msg(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	switch {
	case is == nil:
		return
	case is.Locked:
		msg(w, http.StatusForbidden, "Unable to create comment because issue is locked.")
		return
	case in.Body == nil || strings.TrimSpace(*in.Body) == "":
		invalid(w, map[string]string{"resource": "IssueComment", "code": "missing_field", "field": "body"})
		return
	case utf8.RuneCountInString(*in.Body) > 65536:
		invalid(w, map[string]string{"resource": "IssueComment", "code": "custom", "field": "body", "message": "body is too long (maximum is 65536 characters)"})
		return
	}
	f.comments++
	c := Comment{ID: f.comments, Body: *in.Body}
	is.Comments = append(is.Comments, c)
	downstreamtest.WriteJSON(w, http.StatusCreated, f.renderComment(is, c))
}

func (f *Fake) listComments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per <= 0 {
		per = 30
	}
	per = min(per, 100)
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page <= 0 {
		page = 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	last := max((len(is.Comments)+per-1)/per, 1)
	link := func(p int) string {
		u := *r.URL
		v := u.Query()
		v.Set("page", strconv.Itoa(p))
		v.Set("per_page", strconv.Itoa(per))
		u.RawQuery = v.Encode()
		return f.srv + u.RequestURI()
	}
	if page < last {
		w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next", <%s>; rel="last"`, link(page+1), link(last)))
	}
	out := []map[string]any{}
	for _, c := range is.Comments[min((page-1)*per, len(is.Comments)):min(page*per, len(is.Comments))] {
		out = append(out, f.renderComment(is, c))
	}
	downstreamtest.WriteJSON(w, http.StatusOK, out)
}

func (f *Fake) patchIssue(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var in struct {
		State     *string   `json:"state"`
		Labels    *[]string `json:"labels"`
		Assignees *[]string `json:"assignees"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		msg(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issueOf(w, r)
	if is == nil {
		return
	}
	if in.State != nil && *in.State != "open" && *in.State != "closed" {
		invalid(w, map[string]string{"resource": "Issue", "code": "invalid", "field": "state"})
		return
	}
	if in.Assignees != nil {
		for _, a := range *in.Assignees {
			if !slices.ContainsFunc(f.Assignable, func(x string) bool { return strings.EqualFold(x, a) }) {
				invalid(w, map[string]string{"resource": "Issue", "code": "invalid", "field": "assignees", "value": a})
				return
			}
		}
	}
	if in.State != nil {
		is.State = *in.State
	}
	if f.PushAccess && in.Labels != nil {
		is.Labels = slices.Clone(*in.Labels)
	}
	if f.PushAccess && in.Assignees != nil {
		is.Assignees = slices.Clone(*in.Assignees)
	}
	downstreamtest.WriteJSON(w, http.StatusOK, f.render(*is))
}
