package webhook

// Comments and updates are events of their own, posted to the same URL as
// creates, the same way: the Idempotency-Key (and, signed, the
// webhook-id) is the comment's or update's key, so a receiver that dedupes
// creates dedupes these too, and the target's capabilities are the same
// for all three. The ticket is named as the create's receipt named it (the
// receiver's id, or the key when it answered none): the receiver resolves
// it. Every update field is passed on; the receiver applies what it has.

import (
	"context"
	"encoding/json"
	"time"

	"ticketrelay/delivery/downstream"
)

// Event types of comments and updates.
const (
	CommentEventType = "ticket.commented"
	UpdateEventType  = "ticket.updated"
)

// Comment is the data of a ticket.commented event.
type Comment struct {
	Ticket string `json:"ticket"`
	Body   string `json:"body"`
}

// Update is the data of a ticket.updated event: the fields to set.
type Update struct {
	Ticket string            `json:"ticket"`
	Set    downstream.Update `json:"set"`
}

var (
	_ downstream.Commenter = (*Target)(nil)
	_ downstream.Updater   = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter: those of creates.
func (t *Target) CommentCapabilities() downstream.Capabilities { return t.Capabilities() }

// ParseTicket implements downstream.TicketParser: any id the receiver
// answered (or the create's key).
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	if err := downstream.CheckRef("webhook", t.cfg.Name, ref); err != nil {
		return downstream.Receipt{}, err
	}
	return downstream.Receipt{ExternalID: ref}, nil
}

// AddComment implements downstream.Commenter.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	if _, err := downstream.PrepareComment(t, d); err != nil {
		return downstream.CommentReceipt{}, err
	}
	r, err := t.post(ctx, d.Key, CommentEventType, d.AcceptedAt, Comment{Ticket: d.Ticket, Body: d.Body})
	return downstream.CommentReceipt(r), err
}

// UpdateFields implements downstream.Updater: every field.
func (t *Target) UpdateFields() []downstream.Field { return downstream.Fields }

// Update implements downstream.Updater.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	_, u, err := downstream.PrepareUpdate(t, t.cfg.Name, d)
	if err != nil {
		return downstream.Receipt{}, err
	}
	r, err := t.post(ctx, d.Key, UpdateEventType, d.AcceptedAt, Update{Ticket: d.Ticket, Set: u})
	if err != nil {
		return downstream.Receipt{}, err
	}
	return downstream.Receipt{ExternalID: d.Ticket, URL: r.URL}, nil
}

// event is the envelope of a comment or an update.
type event struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

func (t *Target) post(ctx context.Context, key, typ string, at time.Time, data any) (downstream.Receipt, error) {
	body, err := json.Marshal(event{Type: typ, Timestamp: at.UTC(), Data: data})
	if err != nil {
		return downstream.Receipt{}, &downstream.Error{Class: downstream.Permanent, Err: err}
	}
	return t.send(ctx, key, body)
}
