package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"ticketrelay/outbox"
)

// Status is where a request stands (DESIGN.md "Request status").
type Status string

const (
	StatusUnknown   Status = "unknown"   // no ledger row: never accepted (or expired)
	StatusQueued    Status = "queued"    // committed, waiting in the outbox
	StatusPublished Status = "published" // acknowledged by JetStream, not yet delivered
	StatusDelivered Status = "delivered" // the downstream confirmed it
	StatusRetrying  Status = "retrying"  // the last attempt failed transiently
	StatusFailed    Status = "failed"    // permanent error or attempts exhausted
	StatusUncertain Status = "uncertain" // an attempt's outcome is unknown and cannot be looked up
)

// Delivery states stored in the deliveries table. "attempting" is recorded
// before a call to a downstream without a dedupe key, so that a crash during
// the call is never followed by a blind second call.
const (
	DeliveryAttempting = "attempting"
)

// RequestStatus is what find_request reports.
type RequestStatus struct {
	RequestID     string     `json:"request_id"`
	Status        Status     `json:"status"`
	TicketID      string     `json:"ticket_id,omitempty"`
	Tool          string     `json:"tool,omitempty"`
	Target        string     `json:"target,omitempty"`
	AcceptedAt    *time.Time `json:"accepted_at,omitempty"`
	PublishedAt   *time.Time `json:"published_at,omitempty"`
	Attempts      int        `json:"attempts,omitempty"`
	Throttled     int        `json:"throttled,omitempty"` // of the attempts, refused by the downstream's rate limit; they do not count toward the limit
	InProgress    bool       `json:"in_progress,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	ExternalID    string     `json:"external_id,omitempty"`
	ExternalURL   string     `json:"external_url,omitempty"`
	UpdatedAt     *time.Time `json:"updated_at,omitempty"`
	Detail        string     `json:"detail"`
}

// Find reports the status of requestID. An id never accepted is
// StatusUnknown, not an error.
func (l *Ledger) Find(ctx context.Context, requestID string) (RequestStatus, error) {
	st := RequestStatus{RequestID: requestID, Status: StatusUnknown}
	var id, created int64
	err := l.db.queryRow(ctx,
		`SELECT id, ticket_id, tool, target, created_at FROM requests WHERE request_id = ?`, requestID).
		Scan(&id, &st.TicketID, &st.Tool, &st.Target, &created)
	if errors.Is(err, sql.ErrNoRows) {
		st.Detail = "No request with this request_id was accepted (or its record has expired). " +
			"It is safe to call create_ticket with it."
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("ledger: find %s: %w", requestID, err)
	}
	st.AcceptedAt = timePtr(created)
	pub, _, err := outbox.PublishedAt(ctx, l.db.read, id)
	if err != nil {
		return st, err
	}
	d, found, err := l.Delivery(ctx, requestID)
	if err != nil {
		return st, err
	}
	switch {
	case found:
		st.Attempts, st.Throttled = d.Attempts, d.Throttled
		st.LastError = d.LastError
		st.ExternalID = d.ExternalID
		st.ExternalURL = d.ExternalURL
		st.UpdatedAt = &d.UpdatedAt
		if !d.NextAttemptAt.IsZero() {
			st.NextAttemptAt = &d.NextAttemptAt
		}
		switch {
		case d.State == DeliveryAttempting && d.NextAttemptAt.IsZero():
			st.Status = StatusPublished
			st.InProgress = true
		case d.State == DeliveryAttempting:
			// The attempt ended without a known outcome; the next one looks
			// it up before any resend.
			st.Status = StatusRetrying
		default:
			st.Status = Status(d.State)
		}
	case !pub.IsZero():
		st.Status = StatusPublished
	default:
		st.Status = StatusQueued
	}
	if !pub.IsZero() {
		st.PublishedAt = &pub
	}
	st.Detail = detail(st)
	return st, nil
}

func detail(st RequestStatus) string {
	switch st.Status {
	case StatusQueued:
		return "Accepted and stored; waiting to be handed to the delivery queue. Do not create it again."
	case StatusPublished:
		if st.InProgress {
			return fmt.Sprintf("Delivery attempt %d to %s is in progress. Do not create it again.", st.Attempts, st.Target)
		}
		return "Accepted and queued for delivery to " + st.Target + ". Do not create it again."
	case StatusDelivered:
		if st.ExternalID == "" {
			return "Delivered to " + st.Target + " (it returns no id for what it created)."
		}
		return "Delivered to " + st.Target + " as " + st.ExternalID + "."
	case StatusRetrying:
		return fmt.Sprintf("Attempt %d to %s failed (%s); it will be retried automatically. Do not create it again.",
			st.Attempts, st.Target, st.LastError)
	case StatusFailed:
		return "Delivery to " + st.Target + " failed permanently: " + st.LastError +
			". An operator can redrive it; creating it again with a new request_id would make a new ticket."
	case StatusUncertain:
		return "An attempt to deliver to " + st.Target + " ended without an answer, and " + st.Target +
			" offers no way to check it automatically. Check " + st.Target + " for ticket " + st.TicketID +
			" before creating it again; an operator can settle it."
	}
	return ""
}

func timePtr(ns int64) *time.Time {
	t := time.Unix(0, ns).UTC()
	return &t
}
