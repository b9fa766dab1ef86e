package torture

// Comments and updates in the load (issue 35): besides creates, a caller
// comments on and updates the tickets it filed, often right after the
// create was accepted, so before it was delivered. They travel the way
// creates do: the same cuts, timeouts and retries with the same
// request_id, the same kills, and fakes that lose their answers.

import (
	"fmt"
	"slices"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/slack/slacktest"
	"ticketrelay/delivery/targets"
	"ticketrelay/ticket"
)

// Actions of a request: a create has none.
const (
	ActionComment = ticket.KindComment
	ActionUpdate  = ticket.KindUpdate
)

// Tools beyond create, one for every target.
const (
	CommentTool = "add_comment"
	UpdateTool  = "update_ticket"
)

// actionShare is the share of a caller's requests that comment on or
// update one of its tickets, once it has one; the rest are creates. The
// run's length does not change: the kinds share it.
const actionShare = 0.4

// fakeFrom is the PagerDuty user notes are written as (a user of the fake).
const fakeFrom = "bot@acme.test"

// Fields is what an update sets; a field left empty (nil) is not set.
type Fields struct {
	Status   string    `json:"status,omitempty"`
	Priority string    `json:"priority,omitempty"`
	Labels   *[]string `json:"labels,omitempty"`
}

// defOf is the target definition of kind as configYAML writes it, for
// what the front and the dispatcher derive from it.
func defOf(kind string) targets.Def {
	d := targets.Def{Name: kind, Kind: kind}
	if kind == "pagerduty" {
		d.From = fakeFrom
	}
	return d
}

// commentsExactlyOnce reports whether a comment on kind lands exactly
// once: the API takes its key, or its marker's lookup is consistent.
func commentsExactlyOnce(kind string) bool { return targets.BeyondOf(defOf(kind)).Idempotent() }

// updateFields are the fields the load sets on tickets of kind: status,
// priority and labels where the target has them. PagerDuty's updates are
// left out: it reopens no incident, so "open" after "closed" is refused
// for good, which an agent's update would not be. Assignees are left out
// too: they name users the fakes would have to know.
func updateFields(kind string) []downstream.Field {
	if kind == "pagerduty" {
		return nil
	}
	var out []downstream.Field
	for _, f := range targets.BeyondOf(defOf(kind)).UpdateFields {
		if f == downstream.FieldStatus || f == downstream.FieldPriority || f == downstream.FieldLabels {
			out = append(out, f)
		}
	}
	return out
}

// commentable reports whether a comment on a ticket of kind that the
// load filed can reach it. A Slack message posted through the incoming
// webhook has no ts in its receipt: comments go to a thread of the
// channel named by its CHANNEL/TS instead (fakes.slackThread).
func commentable(kind string) bool {
	return kind != "slack" && targets.BeyondOf(defOf(kind)).Comments
}

// filed is a ticket a caller filed: the create's request id and kind, and
// whether it opened a fingerprint group.
type filed struct {
	id, kind string
	fp       bool
}

// closeShare is the share of a caller's updates that close the last
// fingerprinted ticket it filed, when it has one: a fingerprint's tickets
// are few among the caller's, and a group closed is what makes a later
// report open a new ticket.
const closeShare = 0.25

// retriesBlindly reports whether a caller resends r after an unknown
// outcome without asking find_request first: a create to a target with a
// key, and update_ticket (idempotentHint). add_comment has no
// idempotentHint (Slack's comments are at most once), so a caller asks
// first, as the tool's description says.
func (r Request) retriesBlindly() bool {
	switch r.Action {
	case ActionUpdate:
		return true
	case ActionComment:
		return false
	}
	return r.Keyed
}

// newAction makes up a comment on, or an update of, one of the caller's
// tickets: the last one filed half of the time (its create is often not
// delivered yet), else any.
func (c *caller) newAction(n int) (Request, bool) {
	id := fmt.Sprintf("%s-c%02d-r%04d", c.l.prefix, c.id, n)
	pick := func(ok func(filed) bool) (filed, bool) {
		var cand []filed
		for _, f := range c.filed {
			if ok(f) {
				cand = append(cand, f)
			}
		}
		if len(cand) == 0 {
			return filed{}, false
		}
		if c.rng.IntN(2) == 0 {
			return cand[len(cand)-1], true
		}
		return cand[c.rng.IntN(len(cand))], true
	}
	if c.rng.IntN(5) < 2 {
		if c.rng.Float64() < closeShare {
			for i := len(c.filed) - 1; i >= 0; i-- {
				if f := c.filed[i]; f.fp && slices.Contains(updateFields(f.kind), downstream.FieldStatus) {
					r := c.update(id, f)
					r.Set.Status = "closed"
					return r, true
				}
			}
		}
		if f, ok := pick(func(f filed) bool { return len(updateFields(f.kind)) > 0 }); ok {
			return c.update(id, f), true
		}
	}
	// A comment: on a ticket the caller filed, or now and then on the Slack
	// thread (a ticket ticketrelay did not file, named with its target).
	r := Request{ID: id, Tool: CommentTool, Action: ActionComment,
		Body: fmt.Sprintf("torture comment %s: still failing after the retry.", id)}
	f, ok := pick(func(f filed) bool { return commentable(f.kind) })
	if !ok || c.rng.IntN(6) == 0 {
		r.Target, r.Kind, r.On = "slack", "slack", c.l.slackThread
	} else {
		r.Target, r.Kind, r.On, r.OnRequest = f.kind, f.kind, c.ref(f), f.id
	}
	r.Keyed = commentsExactlyOnce(r.Kind)
	return r, true
}

// ref names f as an agent would: the ticket_id create answered, or the
// request_id it was created under.
func (c *caller) ref(f filed) string {
	if c.rng.IntN(2) == 0 {
		return f.id
	}
	return ticket.IDFor(f.id)
}

// update sets one to three fields of f's ticket.
func (c *caller) update(id string, f filed) Request {
	r := Request{ID: id, Tool: UpdateTool, Action: ActionUpdate, Target: f.kind, Kind: f.kind, Keyed: true,
		On: c.ref(f), OnRequest: f.id, Set: &Fields{}}
	for r.Set.Status == "" && r.Set.Priority == "" && r.Set.Labels == nil {
		for _, fd := range updateFields(f.kind) {
			if c.rng.IntN(2) == 0 {
				continue
			}
			switch fd {
			case downstream.FieldStatus:
				r.Set.Status = []string{"open", "closed"}[c.rng.IntN(2)]
			case downstream.FieldPriority:
				r.Set.Priority = ticket.Priorities[c.rng.IntN(len(ticket.Priorities))]
			case downstream.FieldLabels:
				pool := []string{"torture", "triaged", "regression", "flaky"}
				labels := []string{}
				for _, l := range pool {
					if c.rng.IntN(3) == 0 {
						labels = append(labels, l)
					}
				}
				r.Set.Labels = &labels
			}
		}
	}
	return r
}

// actionArgs are the tool arguments of a comment or an update.
func (r Request) actionArgs() map[string]any {
	a := map[string]any{"request_id": r.ID, "ticket": r.On}
	if r.OnRequest == "" {
		a["target"] = r.Target
	}
	if r.Action == ActionComment {
		a["body"] = r.Body
		return a
	}
	if r.Set.Status != "" {
		a["status"] = r.Set.Status
	}
	if r.Set.Priority != "" {
		a["priority"] = r.Set.Priority
	}
	if r.Set.Labels != nil {
		a["labels"] = slices.Clone(*r.Set.Labels)
	}
	return a
}

// slackThreadOf is the reference of the Slack thread at ts.
func slackThreadOf(ts string) string { return slacktest.Channel + "/" + ts }
