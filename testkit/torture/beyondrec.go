package torture

// What the fakes hold of comments and updates: every comment with the
// request it came from, and each ticket's fields at the end.

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/jira"
	"ticketrelay/delivery/downstream/jira/jiratest"
	"ticketrelay/delivery/downstream/webhook"
	"ticketrelay/ticket"
)

const (
	webhookCreated  = "ticket.created"
	slackParentText = "torture: a message ticketrelay did not post; comments go in its thread"
)

// CommentRecord is one comment a fake holds.
type CommentRecord struct {
	Target string `json:"target"`
	// RequestID is the comment's, parsed from its text ("" if none).
	RequestID string `json:"request_id"`
	// OnRequest is the request id of the ticket it is on, parsed from that
	// ticket's title: "" on the Slack thread, or on no ticket of the run.
	OnRequest string `json:"on_request"`
	Thread    bool   `json:"thread,omitempty"` // on the Slack thread
}

// TicketState is what a fake holds of a ticket's fields at the end, in
// ticketrelay's terms: Status open or closed, Priority one of
// ticket.Priorities ("" where the target has none), Labels lower case,
// sorted, without ticketrelay's reserved ones.
type TicketState struct {
	Target    string   `json:"target"`
	RequestID string   `json:"request_id"` // of the create, from the title
	Status    string   `json:"status"`
	Priority  string   `json:"priority,omitempty"`
	Labels    []string `json:"labels"`
}

// Beyond is what the fakes hold of comments and updates.
type Beyond struct {
	Comments []CommentRecord `json:"comments"`
	States   []TicketState   `json:"states"`
}

// beyond reads the comments and the tickets' fields of every fake.
func (f *fakes) beyond() Beyond {
	var out Beyond
	comment := func(target, text, onTitle string) {
		out.Comments = append(out.Comments, CommentRecord{Target: target, RequestID: ridIn(text), OnRequest: ridIn(onTitle)})
	}
	state := func(target, title, status, priority string, labels []string) {
		out.States = append(out.States, TicketState{Target: target, RequestID: ridIn(title), Status: status, Priority: priority, Labels: cleanLabels(labels)})
	}
	f.webhookBeyond(&out)
	for _, t := range f.zendesk.Tickets() {
		full, _ := f.zendesk.Ticket(t.ID) // Tickets leaves the comments out
		for i, c := range full.Comments {
			if i > 0 { // the first is the description
				comment("zendesk", c.Body, t.Subject)
			}
		}
		status := "open"
		if t.Status == "solved" || t.Status == "closed" {
			status = "closed"
		}
		state("zendesk", t.Subject, status, t.Priority, t.Tags)
	}
	for _, a := range f.pagerduty.Alerts() {
		for _, n := range a.Notes {
			comment("pagerduty", n.Content, a.Summary)
		}
	}
	for _, is := range f.github.Issues() {
		full, _ := f.github.Issue(is.Number)
		for _, c := range full.Comments {
			comment("github", c.Body, is.Title)
		}
		state("github", is.Title, is.State, "", is.Labels)
	}
	names := map[string]string{}
	for p, n := range jira.DefaultPriorityNames {
		names[n] = p
	}
	for _, is := range f.jira.Issues() {
		full, _ := f.jira.Issue(is.Key)
		for _, c := range full.Comments {
			b, _ := json.Marshal(c.Body)
			comment("jira", string(b), is.Summary)
		}
		status := "open"
		if jiratest.Statuses[is.Status] == "done" {
			status = "closed"
		}
		state("jira", is.Summary, status, names[is.Priority], is.Labels)
	}
	if _, ts, ok := strings.Cut(f.slackThread, "/"); ok {
		for _, r := range f.slack.Replies(ts) {
			out.Comments = append(out.Comments, CommentRecord{Target: "slack", RequestID: ridIn(r.Text), Thread: true})
		}
	}
	return out
}

// webhookBeyond reads the webhook receiver's comment and update events. A
// receiver learns a ticket's fields from its ticket.updated events, applied
// in the order of their timestamp (when ticketrelay accepted the update:
// the same on every attempt), as the webhook's contract lets it; arrival
// breaks ties.
func (f *fakes) webhookBeyond(out *Beyond) {
	type update struct {
		at  time.Time
		set downstream.Update
	}
	titles := map[string]string{} // the ticket as events name it → its title
	updates := map[string][]update{}
	for _, d := range f.webhook.Deliveries() {
		var p struct {
			Type      string          `json:"type"`
			Timestamp time.Time       `json:"timestamp"`
			Data      json.RawMessage `json:"data"`
		}
		if json.Unmarshal(d.Body, &p) != nil {
			continue
		}
		switch p.Type {
		case webhookCreated:
			var c struct {
				Title string `json:"title"`
			}
			_ = json.Unmarshal(p.Data, &c)
			titles[d.ID], titles[d.Key] = c.Title, c.Title
		case webhook.CommentEventType:
			var c webhook.Comment
			_ = json.Unmarshal(p.Data, &c)
			out.Comments = append(out.Comments, CommentRecord{Target: "webhook", RequestID: ridIn(c.Body), OnRequest: "\x00" + c.Ticket})
		case webhook.UpdateEventType:
			var u webhook.Update
			_ = json.Unmarshal(p.Data, &u)
			updates[u.Ticket] = append(updates[u.Ticket], update{at: p.Timestamp, set: u.Set})
		}
	}
	// Comments name their ticket as the receiver answered it.
	for i, c := range out.Comments {
		if on, ok := strings.CutPrefix(c.OnRequest, "\x00"); ok {
			out.Comments[i].OnRequest = ridIn(titles[on])
		}
	}
	for tk, us := range updates {
		slices.SortStableFunc(us, func(a, b update) int { return a.at.Compare(b.at) })
		st := TicketState{Target: "webhook", RequestID: ridIn(titles[tk]), Status: "open", Labels: []string{}}
		for _, u := range us {
			if u.set.Status != "" {
				st.Status = string(u.set.Status)
			}
			st.Priority = cmp.Or(u.set.Priority, st.Priority)
			if u.set.Labels != nil {
				st.Labels = cleanLabels(*u.set.Labels)
			}
		}
		out.States = append(out.States, st)
	}
}

// cleanLabels are labels as the checker compares them: lower case, sorted,
// without repeats or ticketrelay's reserved ones (spaces were no part of
// the load's labels).
func cleanLabels(ls []string) []string {
	out := []string{}
	for _, l := range ls {
		l = strings.ToLower(l)
		if !strings.HasPrefix(l, ticket.ReservedLabelPrefix) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
