package redmine

// Comments (journal notes) and updates of an issue, both through
// PUT /issues/{id}.json. Redmine takes no key for either. A note ends with
// the key's marker (downstream.Marker) on a line of its own: Redmine keeps
// no HTML comment (Textile escapes it, CommonMark's sanitizer drops it), so
// the marker stays visible, short. FindComment reads the issue's journals
// (GET /issues/{id}.json?include=journals: every journal in one answer, no
// pagination), SQL on the database the note was written to: consistent.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/internal/rest"
)

// CommentCapabilities: no key; a consistent lookup of the note's marker
// among the issue's journals.
var CommentCapabilities = downstream.Capabilities{Lookup: downstream.LookupConsistent}

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
	_ downstream.Updater       = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter.
func (t *Target) CommentCapabilities() downstream.Capabilities { return CommentCapabilities }

// ParseTicket implements downstream.TicketParser: an issue number (123,
// #123) or its URL on the configured Redmine (BaseURL/issues/123).
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	s := strings.TrimSpace(ref)
	if rest, ok := strings.CutPrefix(s, t.api.Base+"/issues/"); ok {
		s = rest
	}
	n, ok := downstream.TicketNumber(s)
	if !ok {
		return downstream.Receipt{}, downstream.BadTicket("redmine", t.cfg.Name, ref,
			"an issue number (123 or #123) or its URL ("+t.api.Base+"/issues/123)")
	}
	return t.receipt(n), nil
}

// noteTail is what ends a note: the key's marker on a line of its own.
func noteTail(key string) string { return "\n\n" + downstream.Marker(key) }

// AddComment adds a note to the issue. Redmine answers 204 without the
// journal; the receipt's id is the journal's, read back by FindComment
// (empty if that read fails: the note is made all the same).
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	is, err := downstream.PrepareComment(t, d)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	notes := downstream.FitComment(d.Body, noteTail(d.Key), MaxNotes)
	if err := t.put(ctx, is.ExternalID, map[string]any{"notes": notes}); err != nil {
		return downstream.CommentReceipt{}, err
	}
	if r, found, err := t.FindComment(ctx, d); err == nil && found {
		return r, nil
	}
	return downstream.CommentReceipt{URL: is.URL}, nil
}

// MaxNotes bounds a note, in characters: Redmine's column is a TEXT (65535
// bytes on MySQL), so the characters are kept under that in bytes too.
const MaxNotes = 16384

type journal struct {
	ID    int64  `json:"id"`
	Notes string `json:"notes"`
}

// FindComment implements downstream.CommentFinder: the first journal whose
// notes end with the key's marker.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	ref, err := t.ParseTicket(d.Ticket)
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	is, err := t.issue(ctx, ref.ExternalID, "journals")
	if err != nil {
		return downstream.CommentReceipt{}, false, err
	}
	marker := downstream.Marker(d.Key)
	for i, j := range is.Journals {
		if strings.HasSuffix(strings.TrimRight(j.Notes, " \r\n"), marker) {
			// Redmine's note anchors count the issue's journals from 1.
			return downstream.CommentReceipt{ExternalID: strconv.FormatInt(j.ID, 10),
				URL: fmt.Sprintf("%s#note-%d", ref.URL, i+1)}, true, nil
		}
	}
	return downstream.CommentReceipt{}, false, nil
}

// UpdateFields implements downstream.Updater: status, priority (when
// PriorityIDs maps priorities) and assignee (a user id); Redmine has no
// labels.
func (t *Target) UpdateFields() []downstream.Field {
	if len(t.cfg.PriorityIDs) == 0 {
		return []downstream.Field{downstream.FieldStatus, downstream.FieldAssignee}
	}
	return []downstream.Field{downstream.FieldStatus, downstream.FieldPriority, downstream.FieldAssignee}
}

// state is what an update reads and sets of an issue.
type state struct {
	ID     int64 `json:"id"`
	Status struct {
		ID       int  `json:"id"`
		IsClosed bool `json:"is_closed"`
	} `json:"status"`
	Priority   struct{ ID int }  `json:"priority"`
	AssignedTo *struct{ ID int } `json:"assigned_to"`
	Journals   []journal         `json:"journals"`
}

func (s state) assignee() string {
	if s.AssignedTo == nil {
		return ""
	}
	return strconv.Itoa(s.AssignedTo.ID)
}

// Update sets the fields. Status is a category: "closed" moves an open
// issue to ClosedStatusID, "open" a closed one to OpenStatusID, and an
// issue already in the category keeps its status (In Progress stays In
// Progress). Redmine ignores a change the API user's role or the tracker's
// workflow does not allow, without an error: the issue is read back, and a
// field that did not take is a Permanent error saying why.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	ref, u, err := downstream.PrepareUpdate(t, t.cfg.Name, d)
	if err != nil {
		return downstream.Receipt{}, err
	}
	var prio int
	if u.Priority != "" {
		if prio = t.cfg.PriorityIDs[u.Priority]; prio == 0 {
			return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
				"redmine %q: priority %q has no Redmine priority id (priority_ids maps %s)", t.cfg.Name, u.Priority, mapped(t.cfg.PriorityIDs))}
		}
	}
	if u.Assignee != nil && *u.Assignee != "" {
		if n, err := strconv.Atoi(*u.Assignee); err != nil || n <= 0 {
			return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
				"redmine %q: assignee %q: want a Redmine user id (a number; \"\" unassigns)", t.cfg.Name, *u.Assignee)}
		}
	}
	cur, err := t.issue(ctx, ref.ExternalID, "")
	if err != nil {
		return downstream.Receipt{}, err
	}
	set := map[string]any{}
	if u.Status != "" && cur.Status.IsClosed != (u.Status == downstream.StatusClosed) {
		id, err := t.statusID(ctx, u.Status)
		if err != nil {
			return downstream.Receipt{}, err
		}
		set["status_id"] = id
	}
	if prio != 0 && cur.Priority.ID != prio {
		set["priority_id"] = prio
	}
	if u.Assignee != nil && cur.assignee() != *u.Assignee {
		set["assigned_to_id"] = *u.Assignee
	}
	if len(set) == 0 {
		return ref, nil // already so: set twice is set once
	}
	if err := t.put(ctx, ref.ExternalID, set); err != nil {
		return downstream.Receipt{}, err
	}
	after, err := t.issue(ctx, ref.ExternalID, "")
	if err != nil {
		return downstream.Receipt{}, err
	}
	var ignored []string
	if u.Status != "" && after.Status.IsClosed != (u.Status == downstream.StatusClosed) {
		ignored = append(ignored, fmt.Sprintf("status (to %v)", set["status_id"]))
	}
	if prio != 0 && after.Priority.ID != prio {
		ignored = append(ignored, fmt.Sprintf("priority (to %d)", prio))
	}
	if u.Assignee != nil && after.assignee() != *u.Assignee {
		ignored = append(ignored, fmt.Sprintf("assignee (to %q)", *u.Assignee))
	}
	if len(ignored) > 0 {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
			"redmine %q: issue #%s: Redmine accepted the update but ignored %s: the API user's role or the tracker's workflow "+
				"does not allow it (Administration » Workflow, Roles and permissions)", t.cfg.Name, ref.ExternalID, strings.Join(ignored, ", "))}
	}
	return ref, nil
}

func mapped(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// statusID is the status an update moves an issue to: the configured one,
// else the first status of Redmine's list in the category (New and Closed
// in Redmine's default data), read once from GET /issue_statuses.json.
func (t *Target) statusID(ctx context.Context, st downstream.Status) (int, error) {
	if st == downstream.StatusClosed && t.cfg.ClosedStatusID != 0 {
		return t.cfg.ClosedStatusID, nil
	}
	if st == downstream.StatusOpen && t.cfg.OpenStatusID != 0 {
		return t.cfg.OpenStatusID, nil
	}
	t.statuses.mu.Lock()
	defer t.statuses.mu.Unlock()
	if t.statuses.open == 0 {
		req, err := rest.NewJSONRequest(ctx, http.MethodGet, t.api.Base+"/issue_statuses.json", nil)
		if err != nil {
			return 0, err
		}
		var ans struct {
			IssueStatuses []struct {
				ID       int  `json:"id"`
				IsClosed bool `json:"is_closed"`
			} `json:"issue_statuses"`
		}
		if err := t.call(req, &ans); err != nil {
			return 0, err
		}
		var open, closed int
		for _, s := range ans.IssueStatuses {
			switch {
			case s.IsClosed && closed == 0:
				closed = s.ID
			case !s.IsClosed && open == 0:
				open = s.ID
			}
		}
		if open == 0 || closed == 0 {
			return 0, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
				"redmine %q: Redmine lists no open or no closed issue status; set open_status_id and closed_status_id", t.cfg.Name)}
		}
		t.statuses.open, t.statuses.closed = open, closed
	}
	if st == downstream.StatusClosed {
		return t.statuses.closed, nil
	}
	return t.statuses.open, nil
}

// statusCache holds the statuses read from Redmine.
type statusCache struct {
	mu           sync.Mutex
	open, closed int
}

// issue reads one issue (include: "journals" or "").
func (t *Target) issue(ctx context.Context, id, include string) (state, error) {
	u := t.api.Base + "/issues/" + id + ".json"
	if include != "" {
		u += "?include=" + include
	}
	req, err := rest.NewJSONRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return state{}, err
	}
	var ans struct {
		Issue state `json:"issue"`
	}
	if err := t.call(req, &ans); err != nil {
		return state{}, t.missing(err, id)
	}
	return ans.Issue, nil
}

// put changes issue id (Redmine answers 204 No Content).
func (t *Target) put(ctx context.Context, id string, in map[string]any) error {
	req, err := rest.NewJSONRequest(ctx, http.MethodPut, t.api.Base+"/issues/"+id+".json", map[string]any{"issue": in})
	if err != nil {
		return err
	}
	return t.missing(t.call(req, nil), id)
}

// missing says what a 404 on an issue means (Redmine answers it with no
// body; the create path's message would name the project).
func (t *Target) missing(err error, id string) error {
	var e *downstream.Error
	if errors.As(err, &e) && e.StatusCode == http.StatusNotFound {
		e.Err = fmt.Errorf("issue #%s not found (or not visible to the API user)", id)
	}
	return err
}
