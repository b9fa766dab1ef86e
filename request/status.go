package request

import (
	"cmp"
	"time"

	"ticketrelay/ticket"
)

// Status is where a request stands (DESIGN.md "Request status").
type Status string

const (
	StatusUnknown   Status = "unknown"   // no ledger row: never accepted, still being stored, or forgotten after retention
	StatusQueued    Status = "queued"    // committed, waiting in the outbox
	StatusPublished Status = "published" // acknowledged by JetStream, not yet delivered
	StatusDelivered Status = "delivered" // the downstream confirmed it
	StatusRetrying  Status = "retrying"  // the last attempt failed transiently
	StatusFailed    Status = "failed"    // permanent error or attempts exhausted
	StatusUncertain Status = "uncertain" // an attempt's outcome is unknown and cannot be looked up
)

// Report is where a request stands, as a store reports it: data only.
// The JSON names are those of find_request's answer and of the
// dispatcher's `status -json`; the front that answers adds the detail
// (mcptools.RequestStatus). Only request_id and status are always
// present; the other fields appear when they apply (mcptools'
// find_request output schema describes each of them).
type Report struct {
	RequestID     string     `json:"request_id"`                // as the caller gave it
	Status        Status     `json:"status"`                    // one of the Status values
	TicketID      string     `json:"ticket_id,omitempty"`       // ticketrelay's id, derived from request_id
	Tool          string     `json:"tool,omitempty"`            // the create tool that accepted it
	Target        string     `json:"target,omitempty"`          // where it is delivered
	AcceptedAt    *time.Time `json:"accepted_at,omitempty"`     // when the ledger committed it
	PublishedAt   *time.Time `json:"published_at,omitempty"`    // when JetStream acknowledged it
	Attempts      int        `json:"attempts,omitempty"`        // delivery calls made so far
	Throttled     int        `json:"throttled,omitempty"`       // of the attempts, refused by the downstream's rate limit; they do not count toward the limit
	InProgress    bool       `json:"in_progress,omitempty"`     // a delivery call is running now
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"` // when the next attempt (or lookup) is due
	LastError     string     `json:"last_error,omitempty"`      // the last attempt's error, as the forwarder recorded it
	ExternalID    string     `json:"external_id,omitempty"`     // the downstream's id of the item, once delivered
	ExternalURL   string     `json:"external_url,omitempty"`    // a link to it, once delivered
	UpdatedAt     *time.Time `json:"updated_at,omitempty"`      // when the delivery record last changed
	// Caller is who asked, as recorded with the ticket; nil for the
	// anonymous local caller.
	Caller *ticket.Caller `json:"caller,omitempty"`
	// Kind is a comment's or an update's kind (ticket.KindComment,
	// ticket.KindUpdate); absent for a create.
	Kind string `json:"kind,omitempty"`
	// Ticket is what a comment or an update acts on: the create's ticket
	// id (TicketID holds it too) or the downstream's own reference.
	Ticket string `json:"ticket,omitempty"`
	// Comments and Updates are, for a create, the comments and updates
	// requested on its ticket, oldest first (at most MaxActionsShown).
	Comments []Action `json:"comments,omitempty"`
	Updates  []Action `json:"updates,omitempty"`
	// Fingerprint is the fingerprint the request was filed with; Grouped
	// says it was stored as an occurrence of the open ticket of that
	// fingerprint (Ticket names it) instead of a ticket of its own.
	Fingerprint string `json:"fingerprint,omitempty"`
	Grouped     bool   `json:"grouped,omitempty"`

	// What the front writes its words from, beside the fields above; not
	// on the wire.

	// Scoped is the request's scoped id (ticket.ScopedID), "" if not known.
	Scoped string `json:"-"`
	// Failure is the class of a failed delivery.
	Failure Failure `json:"-"`
	// Served is, for a request still on its way (queued, published or
	// retrying), what the running dispatchers deliver to; nil otherwise.
	Served *Served `json:"-"`
	// Interrupted reports that no host accepted the request, but a call
	// claimed it in the cluster record and was cut off (or is still
	// running): a repeat with the same arguments completes it.
	Interrupted bool `json:"-"`
}

// InterruptedStatus is the report of such a request (see
// Report.Interrupted).
func InterruptedStatus(requestID string) Report {
	return Report{RequestID: requestID, Status: StatusUnknown, Interrupted: true}
}

// Failure is why a delivery failed, as data: the forwarder writes it from
// the downstream error's class (downstream.Error), an operator's resolve
// writes FailureSettled. What find_request advises depends on it.
type Failure string

const (
	// FailureUnknown: no class recorded (not failed, or a cluster record
	// written before classes were): a failure that may have reached the
	// downstream.
	FailureUnknown Failure = ""
	// FailureRejected: the downstream refused the request (a 4xx other
	// than an auth error): a refusal that may be about its content.
	FailureRejected Failure = "rejected"
	// FailureAuth: the downstream refused ticketrelay's credentials.
	FailureAuth Failure = "auth"
	// FailureExhausted: the attempts ran out; some may have reached the
	// downstream.
	FailureExhausted Failure = "exhausted"
	// FailurePermanent: refused for good without an HTTP refusal (the
	// request could not be sent as it is).
	FailurePermanent Failure = "permanent"
	// FailureSettled: an operator checked the downstream and settled an
	// uncertain request as not delivered.
	FailureSettled Failure = "settled"
)

// Settle sets r's status and delivery fields from its delivery record d
// (nil: none yet) and r.PublishedAt.
func (r *Report) Settle(d *Delivery) {
	switch {
	case d != nil:
		r.Attempts, r.Throttled = d.Attempts, d.Throttled
		r.LastError, r.ExternalID, r.ExternalURL = d.LastError, d.ExternalID, d.ExternalURL
		r.Failure = d.Failure
		r.UpdatedAt = &d.UpdatedAt
		if !d.NextAttemptAt.IsZero() {
			r.NextAttemptAt = &d.NextAttemptAt
		}
		switch {
		case d.State == DeliveryAttempting && d.NextAttemptAt.IsZero():
			r.Status = StatusPublished
			r.InProgress = true
		case d.State == DeliveryAttempting:
			// The attempt ended without a known outcome; the next one looks
			// it up before any resend.
			r.Status = StatusRetrying
		default:
			r.Status = Status(d.State)
		}
	case r.PublishedAt != nil:
		r.Status = StatusPublished
	default:
		r.Status = StatusQueued
	}
}

// StatusOf is the report of a request known as its ticket t
// (Request.RequestID as the caller gave it), when it was accepted, when it
// was published (nil: not known) and its delivery record (nil: none yet).
func StatusOf(t ticket.Ticket, accepted time.Time, published *time.Time, d *Delivery) Report {
	r := Report{RequestID: t.RequestID, TicketID: t.ID, Tool: t.Tool, Target: t.Target,
		AcceptedAt: &accepted, PublishedAt: published, Caller: t.Caller.OrNil(), Scoped: t.Scoped(),
		Kind: t.Kind, Ticket: cmp.Or(t.Ref, t.ID), Fingerprint: t.Fingerprint}
	if t.Kind == ticket.KindCreate {
		r.Ticket = ""
	}
	r.Grouped = t.Kind == ticket.KindComment && t.Fingerprint != ""
	r.Settle(d)
	return r
}

// OnItsWay reports whether the request is still on its way to delivery:
// whether a running dispatcher will deliver it matters.
func (r Report) OnItsWay() bool {
	return r.Status == StatusQueued || r.Status == StatusPublished || r.Status == StatusRetrying
}

// OperatorName is the name the dispatcher's commands take for r: its
// scoped id (ticket.ScopedID).
func (r Report) OperatorName() string { return cmp.Or(r.Scoped, r.RequestID) }
