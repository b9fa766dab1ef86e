package jira

// Comments and updates of an issue. Jira takes no key for either. A
// comment's Atlassian Document ends with a paragraph holding the key's
// marker alone: an Atlassian Document has no hidden node. FindComment
// pages through the issue's comments (GET /rest/api/3/issue/{key}/comment,
// startAt and maxResults, oldest first), which are read from the issue,
// not from the search index whose lag makes Find eventual: the target
// declares a consistent comment lookup.
//
// An update: priority, labels and assignee through PUT /rest/api/3/issue
// (fields set to the values given); status through the workflow's
// transitions: to close, the first transition available to a status of the
// "done" category, to reopen the first to any other category; an issue
// already in the category is left as it is.

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

// CommentsPerPage is the most comments a lookup asks for on one page.
const CommentsPerPage = 100

// MaxComment is Jira's limit on a comment body, in characters.
const MaxComment = 32767

// DefaultPriorityNames maps ticket priorities to the priorities of Jira's
// default priority scheme.
var DefaultPriorityNames = map[string]string{"low": "Low", "normal": "Medium", "high": "High", "urgent": "Highest"}

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
	_ downstream.Updater       = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter.
func (t *Target) CommentCapabilities() downstream.Capabilities { return CommentCapabilities }

var issueKey = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_]*)-([1-9][0-9]{0,17})$`)

// ParseTicket implements downstream.TicketParser: an issue key of the
// project (OPS-12) or its page (BaseURL/browse/OPS-12).
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	s := strings.TrimSpace(ref)
	if rest, ok := strings.CutPrefix(s, t.api.Base+"/browse/"); ok {
		s = rest
	}
	m := issueKey.FindStringSubmatch(s)
	if m == nil || !strings.EqualFold(m[1], t.cfg.Project) {
		return downstream.Receipt{}, downstream.BadTicket("jira", t.cfg.Name, ref, fmt.Sprintf(
			"an issue key of project %s (%s-123) or its page (%s/browse/%s-123)", t.cfg.Project, t.cfg.Project, t.api.Base, t.cfg.Project))
	}
	return t.receipt(strings.ToUpper(m[1]) + "-" + m[2]), nil
}

// commentDoc is the comment's Atlassian Document: the body, then the
// marker's paragraph.
func commentDoc(d downstream.CommentDelivery) map[string]any {
	return ADF(downstream.FitComment(d.Body, "\n\n"+downstream.Marker(d.Key), MaxComment))
}

type comment struct {
	ID   string `json:"id"`
	Body struct {
		Content []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"content"`
	} `json:"body"`
}

// lastParagraph is the text of the document's last block.
func (c comment) lastParagraph() string {
	if len(c.Body.Content) == 0 {
		return ""
	}
	var b strings.Builder
	for _, n := range c.Body.Content[len(c.Body.Content)-1].Content {
		b.WriteString(n.Text)
	}
	return b.String()
}

func (t *Target) commentReceipt(key, id string) downstream.CommentReceipt {
	return downstream.CommentReceipt{ExternalID: id, URL: t.receipt(key).URL + "?focusedCommentId=" + url.QueryEscape(id)}
}

// AddComment implements downstream.Commenter.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	is, err := downstream.PrepareComment(t, d)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.issueURL(is.ExternalID)+"/comment", map[string]any{"body": commentDoc(d)})
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	var c comment
	if err := t.call(req, &c); err != nil {
		return downstream.CommentReceipt{}, err
	}
	return t.commentReceipt(is.ExternalID, c.ID), nil
}

// FindComment implements downstream.CommentFinder.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	is, err := t.ParseTicket(d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	marker := downstream.Marker(d.Key)
	for start := 0; ; {
		q := url.Values{"startAt": {strconv.Itoa(start)}, "maxResults": {strconv.Itoa(CommentsPerPage)}, "orderBy": {"created"}}
		req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.issueURL(is.ExternalID)+"/comment?"+q.Encode(), nil)
		if err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		var page struct {
			StartAt  int       `json:"startAt"`
			Total    int       `json:"total"`
			Comments []comment `json:"comments"`
		}
		if err := t.call(req, &page); err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		for _, c := range page.Comments {
			if c.lastParagraph() == marker {
				return t.commentReceipt(is.ExternalID, c.ID), true, nil
			}
		}
		// The page may hold fewer than asked (Jira caps maxResults):
		// go on from what it did hold, until total.
		start = page.StartAt + len(page.Comments)
		if len(page.Comments) == 0 || start >= page.Total {
			return downstream.CommentReceipt{}, false, nil
		}
	}
}

// UpdateFields implements downstream.Updater.
func (t *Target) UpdateFields() []downstream.Field { return downstream.Fields }

func (t *Target) issueURL(key string) string {
	return t.api.Base + "/rest/api/3/issue/" + url.PathEscape(key)
}

type category struct {
	Key string `json:"key"` // new, indeterminate, done
}

type issueState struct {
	Fields struct {
		Status struct {
			StatusCategory category `json:"statusCategory"`
		} `json:"status"`
		Priority *struct {
			Name string `json:"name"`
		} `json:"priority"`
		Labels   []string `json:"labels"`
		Assignee *struct {
			AccountID string `json:"accountId"`
		} `json:"assignee"`
	} `json:"fields"`
}

// Update implements downstream.Updater.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	ref, u, err := downstream.PrepareUpdate(t, t.cfg.Name, d)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var cur issueState
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.issueURL(ref.ExternalID)+"?fields=status,priority,labels,assignee", nil)
	if err != nil {
		return downstream.Receipt{}, err
	}
	if err := t.call(req, &cur); err != nil {
		return downstream.Receipt{}, err
	}
	fields := map[string]any{}
	if u.Priority != "" {
		name := t.priorityName(u.Priority)
		if cur.Fields.Priority == nil || cur.Fields.Priority.Name != name {
			fields["priority"] = map[string]string{"name": name}
		}
	}
	if u.Labels != nil {
		var labels []string
		for _, l := range cur.Fields.Labels {
			if strings.HasPrefix(strings.ToLower(l), ticket.ReservedLabelPrefix) {
				labels = append(labels, l) // the key label Find needs
			}
		}
		for _, l := range *u.Labels {
			labels = append(labels, strings.ReplaceAll(l, " ", "_"))
		}
		if !sameSet(labels, cur.Fields.Labels) {
			fields["labels"] = labels
		}
	}
	if u.Assignee != nil {
		have := ""
		if cur.Fields.Assignee != nil {
			have = cur.Fields.Assignee.AccountID
		}
		if have != *u.Assignee {
			if *u.Assignee == "" {
				fields["assignee"] = nil
			} else {
				fields["assignee"] = map[string]string{"accountId": *u.Assignee}
			}
		}
	}
	if len(fields) > 0 {
		req, err := rest.NewJSONRequest(ctx, http.MethodPut, t.issueURL(ref.ExternalID), map[string]any{"fields": fields})
		if err != nil {
			return downstream.Receipt{}, err
		}
		if err := t.call(req, nil); err != nil {
			return downstream.Receipt{}, err
		}
	}
	if u.Status != "" && (cur.Fields.Status.StatusCategory.Key == "done") != (u.Status == downstream.StatusClosed) {
		if err := t.transition(ctx, ref.ExternalID, u.Status); err != nil {
			return downstream.Receipt{}, err
		}
	}
	return ref, nil
}

func (t *Target) priorityName(p string) string {
	if n, ok := t.cfg.PriorityNames[p]; ok {
		return n
	}
	return DefaultPriorityNames[p]
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// transition moves the issue into the status category st asks for, by the
// first transition the workflow offers to it.
func (t *Target) transition(ctx context.Context, key string, st downstream.Status) error {
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.issueURL(key)+"/transitions", nil)
	if err != nil {
		return err
	}
	var ans struct {
		Transitions []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
			To   struct {
				StatusCategory category `json:"statusCategory"`
			} `json:"to"`
		} `json:"transitions"`
	}
	if err := t.call(req, &ans); err != nil {
		return err
	}
	var names []string
	for _, tr := range ans.Transitions {
		if (tr.To.StatusCategory.Key == "done") == (st == downstream.StatusClosed) {
			req, err := rest.NewJSONRequest(ctx, http.MethodPost, t.issueURL(key)+"/transitions", map[string]any{"transition": map[string]string{"id": tr.ID}})
			if err != nil {
				return err
			}
			return t.call(req, nil)
		}
		names = append(names, tr.Name)
	}
	return &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
		"jira %q: issue %s: the workflow offers the API user no transition to a %s status (it offers: %s)",
		t.cfg.Name, key, map[downstream.Status]string{downstream.StatusClosed: "done", downstream.StatusOpen: "not done"}[st], strings.Join(names, ", "))}
}
