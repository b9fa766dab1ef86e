package zendesk

// Comments and updates of a ticket, both through PUT /api/v2/tickets/{id}.
// Zendesk documents its Idempotency-Key for creating tickets only, so a
// comment carries the key's marker on its last line (the plain-text body
// keeps no hidden markup) and FindComment pages through the ticket's
// comments (GET /api/v2/tickets/{id}/comments, cursor pagination:
// page[size]=100, links.next while meta.has_more), read from the ticket
// store like the external_id list Find uses: consistent. A comment is an
// internal note unless Config.PublicComments: a public one is mailed to
// the requester.
//
// Status maps to Zendesk's: "closed" sets solved (Zendesk closes a solved
// ticket itself later, and a closed ticket takes no update at all), "open"
// sets open; a ticket already in the category (new, open, pending, on-hold;
// solved, closed) is left as it is. Priority is Zendesk's own scale,
// labels are the ticket's tags, the assignee an agent's user id.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

// CommentCapabilities: no key for comments; a consistent lookup of the
// marker among the ticket's comments.
var CommentCapabilities = downstream.Capabilities{Lookup: downstream.LookupConsistent}

// CommentsPerPage is the page size a lookup asks for (Zendesk's most).
const CommentsPerPage = 100

// maxPages bounds a lookup: an end, whatever the API answers.
const maxPages = 100

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
	_ downstream.Updater       = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter.
func (t *Target) CommentCapabilities() downstream.Capabilities { return CommentCapabilities }

// ParseTicket implements downstream.TicketParser: a ticket number (123,
// #123) or its agent page (BaseURL/agent/tickets/123).
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	s := strings.TrimSpace(ref)
	if rest, ok := strings.CutPrefix(s, t.api.Base+"/agent/tickets/"); ok {
		s = rest
	}
	n, ok := downstream.TicketNumber(s)
	if !ok {
		return downstream.Receipt{}, downstream.BadTicket("zendesk", t.cfg.Name, ref,
			"a ticket number (123 or #123) or its page ("+t.api.Base+"/agent/tickets/123)")
	}
	return t.receipt(n), nil
}

// MaxComment bounds a comment, in characters: under Zendesk's 64 KB for a
// comment body even in 4-byte characters.
const MaxComment = 65535 / 4

func commentTail(key string) string { return "\n\n" + downstream.Marker(key) }

// AddComment implements downstream.Commenter.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	tk, err := downstream.PrepareComment(t, d)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	var ans struct {
		Audit struct {
			Events []struct {
				ID   int64  `json:"id"`
				Type string `json:"type"`
			} `json:"events"`
		} `json:"audit"`
	}
	body := map[string]any{"body": downstream.FitComment(d.Body, commentTail(d.Key), MaxComment), "public": t.cfg.PublicComments}
	if err := t.put(ctx, tk.ExternalID, map[string]any{"comment": body}, &ans); err != nil {
		return downstream.CommentReceipt{}, err
	}
	for _, ev := range ans.Audit.Events {
		if ev.Type == "Comment" {
			return downstream.CommentReceipt{ExternalID: strconv.FormatInt(ev.ID, 10), URL: tk.URL}, nil
		}
	}
	return downstream.CommentReceipt{URL: tk.URL}, nil
}

// FindComment implements downstream.CommentFinder.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	tk, err := t.ParseTicket(d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	marker := downstream.Marker(d.Key)
	next := t.api.Base + "/api/v2/tickets/" + tk.ExternalID + "/comments?" + url.Values{"page[size]": {strconv.Itoa(CommentsPerPage)}}.Encode()
	for pages := 0; next != ""; pages++ {
		if pages == maxPages {
			return downstream.CommentReceipt{}, false, &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf(
				"zendesk %q: ticket #%s has more than %d pages of comments; the lookup stops there without an answer", t.cfg.Name, tk.ExternalID, maxPages)}
		}
		req, err := rest.NewJSONRequest(ctx, http.MethodGet, next, nil)
		if err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		var page struct {
			Comments []struct {
				ID   int64  `json:"id"`
				Body string `json:"body"`
			} `json:"comments"`
			Meta struct {
				HasMore bool `json:"has_more"`
			} `json:"meta"`
			Links struct {
				Next string `json:"next"`
			} `json:"links"`
		}
		if err := t.call(req, &page); err != nil {
			return downstream.CommentReceipt{}, false, err
		}
		for _, c := range page.Comments {
			if strings.HasSuffix(strings.TrimRight(c.Body, " \r\n"), marker) {
				return downstream.CommentReceipt{ExternalID: strconv.FormatInt(c.ID, 10), URL: tk.URL}, true, nil
			}
		}
		next = ""
		if page.Meta.HasMore {
			if next, err = t.sameHost(page.Links.Next); err != nil {
				return downstream.CommentReceipt{}, false, err
			}
		}
	}
	return downstream.CommentReceipt{}, false, nil
}

// sameHost checks that a next page is on the account's host: the
// credentials go along with the request.
func (t *Target) sameHost(next string) (string, error) {
	u, err := url.Parse(next)
	base, _ := url.Parse(t.api.Base)
	if err != nil || next == "" || u.Scheme != base.Scheme || u.Host != base.Host {
		return "", &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf(
			"zendesk %q: the next page of comments is not on %s", t.cfg.Name, base.Host)}
	}
	return next, nil
}

// UpdateFields implements downstream.Updater.
func (t *Target) UpdateFields() []downstream.Field { return downstream.Fields }

// Update implements downstream.Updater.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	tk, u, err := downstream.PrepareUpdate(t, t.cfg.Name, d)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var assignee int64
	if u.Assignee != nil && *u.Assignee != "" {
		if assignee, err = strconv.ParseInt(*u.Assignee, 10, 64); err != nil || assignee <= 0 {
			return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
				"zendesk %q: assignee %q: want an agent's user id (a number; \"\" unassigns)", t.cfg.Name, *u.Assignee)}
		}
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.api.Base+"/api/v2/tickets/"+tk.ExternalID, nil)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var cur struct {
		Ticket struct {
			Status     string   `json:"status"`
			Priority   string   `json:"priority"`
			Tags       []string `json:"tags"`
			AssigneeID *int64   `json:"assignee_id"`
		} `json:"ticket"`
	}
	if err := t.call(req, &cur); err != nil {
		return downstream.Receipt{}, err
	}
	c := cur.Ticket
	set := map[string]any{}
	closed := c.Status == "solved" || c.Status == "closed"
	if u.Status != "" && closed != (u.Status == downstream.StatusClosed) {
		set["status"] = map[downstream.Status]string{downstream.StatusClosed: "solved", downstream.StatusOpen: "open"}[u.Status]
	}
	if u.Priority != "" && c.Priority != u.Priority {
		set["priority"] = u.Priority
	}
	if u.Labels != nil {
		tags := make([]string, 0, len(*u.Labels))
		for _, l := range *u.Labels {
			tags = append(tags, strings.ToLower(strings.ReplaceAll(l, " ", "_"))) // Zendesk keeps tags lower case
		}
		if !slices.Equal(sorted(tags), sorted(c.Tags)) {
			set["tags"] = tags
		}
	}
	if u.Assignee != nil {
		var have int64
		if c.AssigneeID != nil {
			have = *c.AssigneeID
		}
		if have != assignee {
			if assignee == 0 {
				set["assignee_id"] = nil
			} else {
				set["assignee_id"] = assignee
			}
		}
	}
	if len(set) == 0 {
		return tk, nil // already so: set twice is set once
	}
	return tk, t.put(ctx, tk.ExternalID, set, nil)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// put updates ticket id with the given ticket members.
func (t *Target) put(ctx context.Context, id string, in map[string]any, out any) error {
	req, err := rest.NewJSONRequest(ctx, http.MethodPut, t.api.Base+"/api/v2/tickets/"+id, map[string]any{"ticket": in})
	if err != nil {
		return err
	}
	if out == nil {
		out = &struct{}{}
	}
	return t.call(req, out)
}
