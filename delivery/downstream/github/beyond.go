package github

// Comments and updates of an issue. GitHub takes no key for either.
// A comment ends with the key's marker inside an HTML comment, which
// GitHub keeps in the body and does not render; FindComment pages through
// the issue's comments (GET …/issues/{n}/comments, ascending ids, 100 a
// page, the Link header's rel="next"), a read of the database the comment
// was written to: consistent, as the issues list Find uses is.
//
// An update is one PATCH …/issues/{n} of what differs from the issue as
// read just before: state, labels (the whole set; the key labels
// ticketrelay put on its issues are kept, or Find could no longer see
// them) and assignees (one login, or none). GitHub silently drops label
// and assignee changes of a token without push access: the answer is
// checked, and a change that did not take is a Permanent error.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/ticket"
)

// CommentCapabilities: no key; a consistent lookup of the marker among the
// issue's comments.
var CommentCapabilities = downstream.Capabilities{Lookup: downstream.LookupConsistent}

// CommentsPerPage is the most comments GitHub lists on one page.
const CommentsPerPage = 100

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
	_ downstream.Updater       = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter.
func (t *Target) CommentCapabilities() downstream.Capabilities { return CommentCapabilities }

// webRoot is where the issues' pages are: github.com for the public API,
// the host of a GitHub Enterprise Server's https://HOST/api/v3.
func (t *Target) webRoot() string {
	if t.api.Base == DefaultBaseURL {
		return "https://github.com"
	}
	return strings.TrimSuffix(t.api.Base, "/api/v3")
}

var issueNumber = regexp.MustCompile(`^#?([1-9][0-9]{0,18})$`)

// ParseTicket implements downstream.TicketParser: an issue number (123,
// #123), owner/repo#123, or the issue's page or API URL, of the configured
// repository only.
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	s := strings.TrimSpace(ref)
	full := t.cfg.Owner + "/" + t.cfg.Repo
	for _, prefix := range []string{t.webRoot() + "/" + full + "/issues/", t.repo + "/issues/", full + "#"} {
		if len(s) > len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
			s = s[len(prefix):]
			break
		}
	}
	m := issueNumber.FindStringSubmatch(s)
	if m == nil {
		return downstream.Receipt{}, downstream.BadTicket("github", t.cfg.Name, ref, fmt.Sprintf(
			"an issue number of %s (123, #123, %s#123) or its URL (%s/%s/issues/123)", full, full, t.webRoot(), full))
	}
	return downstream.Receipt{ExternalID: m[1], URL: t.webRoot() + "/" + full + "/issues/" + m[1]}, nil
}

// commentTail ends a comment: the key's marker in an HTML comment.
func commentTail(key string) string { return "\n\n<!-- " + downstream.Marker(key) + " -->" }

type comment struct {
	ID      int64  `json:"id"`
	HTMLURL string `json:"html_url"`
	Body    string `json:"body"`
}

func (c comment) receipt() downstream.CommentReceipt {
	return downstream.CommentReceipt{ExternalID: strconv.FormatInt(c.ID, 10), URL: rest.Clean(c.HTMLURL)}
}

// AddComment implements downstream.Commenter.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	is, err := downstream.PrepareComment(t, d)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.repo+"/issues/"+is.ExternalID+"/comments",
		map[string]string{"body": downstream.FitComment(d.Body, commentTail(d.Key), MaxBody)})
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	var c comment
	if err := t.call(req, &c); err != nil {
		return downstream.CommentReceipt{}, err
	}
	return c.receipt(), nil
}

// FindComment implements downstream.CommentFinder: the first comment of
// the issue that ends with the key's marker, through every page.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	is, err := t.ParseTicket(d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	tail := strings.TrimSpace(commentTail(d.Key))
	next := t.repo + "/issues/" + is.ExternalID + "/comments?per_page=" + strconv.Itoa(CommentsPerPage)
	for pages := 0; next != ""; pages++ {
		if pages == maxPages {
			return downstream.CommentReceipt{}, false, &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf(
				"github %q: issue #%s has more than %d comments; the lookup stops there without an answer", t.cfg.Name, is.ExternalID, maxPages*CommentsPerPage)}
		}
		req, err := rest.NewJSONRequest(ctx, http.MethodGet, next, nil)
		if err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		var page []comment
		resp, err := t.callResp(req, &page)
		if err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		for _, c := range page {
			if strings.HasSuffix(strings.TrimRight(c.Body, " \r\n"), tail) {
				return c.receipt(), true, nil
			}
		}
		if next, err = t.nextPage(resp.Header); err != nil {
			return downstream.CommentReceipt{}, false, err
		}
	}
	return downstream.CommentReceipt{}, false, nil
}

// maxPages bounds a lookup (GitHub locks conversations long before
// 2,500 comments in practice, and a lookup must end).
const maxPages = 25

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// nextPage reads the Link header's rel="next" (none: the last page). A
// next page elsewhere than the API's host is refused: the token would go
// along.
func (t *Target) nextPage(h http.Header) (string, error) {
	m := nextLink.FindStringSubmatch(h.Get("Link"))
	if m == nil {
		return "", nil
	}
	next, err := url.Parse(m[1])
	base, _ := url.Parse(t.api.Base)
	if err != nil || next.Scheme != base.Scheme || next.Host != base.Host {
		return "", &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf(
			"github %q: the next page of comments is not on %s", t.cfg.Name, base.Host)}
	}
	return next.String(), nil
}

// UpdateFields implements downstream.Updater: GitHub issues have a state,
// labels and assignees, and no priority.
func (t *Target) UpdateFields() []downstream.Field {
	return []downstream.Field{downstream.FieldStatus, downstream.FieldLabels, downstream.FieldAssignee}
}

type issueState struct {
	issue
	State     string `json:"state"`
	Assignees []struct {
		Login string `json:"login"`
	} `json:"assignees"`
}

func (s issueState) assignees() []string {
	var out []string
	for _, a := range s.Assignees {
		out = append(out, a.Login)
	}
	return out
}

// Update implements downstream.Updater.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	ref, u, err := downstream.PrepareUpdate(t, t.cfg.Name, d)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var cur issueState
	if err := t.get(ctx, t.repo+"/issues/"+ref.ExternalID, &cur); err != nil {
		return downstream.Receipt{}, err
	}
	patch := map[string]any{}
	if u.Status != "" && cur.State != string(u.Status) {
		patch["state"] = string(u.Status)
	}
	var labels []string
	if u.Labels != nil {
		// The caller's labels, and the reserved ones already there.
		for _, l := range cur.labelNames() {
			if len(l) >= len(ticket.ReservedLabelPrefix) && strings.EqualFold(l[:len(ticket.ReservedLabelPrefix)], ticket.ReservedLabelPrefix) {
				labels = append(labels, l)
			}
		}
		for _, l := range *u.Labels {
			labels = append(labels, Label(l))
		}
		if !sameFold(labels, cur.labelNames()) {
			patch["labels"] = labels
		}
	}
	var assignees []string
	if u.Assignee != nil {
		assignees = []string{}
		if *u.Assignee != "" {
			assignees = []string{*u.Assignee}
		}
		if !sameFold(assignees, cur.assignees()) {
			patch["assignees"] = assignees
		}
	}
	if len(patch) == 0 {
		return ref, nil // already so: set twice is set once
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPatch, t.repo+"/issues/"+ref.ExternalID, patch)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var after issueState
	if err := t.call(req, &after); err != nil {
		return downstream.Receipt{}, err
	}
	var dropped []string
	if _, ok := patch["labels"]; ok && !sameFold(labels, after.labelNames()) {
		dropped = append(dropped, "labels")
	}
	if _, ok := patch["assignees"]; ok && !sameFold(assignees, after.assignees()) {
		dropped = append(dropped, "assignee")
	}
	if len(dropped) > 0 {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
			"github %q: issue #%s: GitHub accepted the update but dropped the %s: the token needs push (write) access to %s/%s "+
				"(GitHub drops label and assignee changes of other tokens silently), and an assignee must be able to be assigned there",
			t.cfg.Name, ref.ExternalID, strings.Join(dropped, " and "), t.cfg.Owner, t.cfg.Repo)}
	}
	return ref, nil
}

// sameFold reports whether a and b hold the same names, in any order,
// without regard to case (GitHub's label names and logins compare so).
func sameFold(a, b []string) bool {
	norm := func(s []string) []string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = strings.ToLower(x)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}
