package request

import (
	"errors"
	"fmt"
	"time"
)

// Result is the answer to a create: it is saved with the request and
// replayed, unchanged but for Replayed, to every repeat of the request.
type Result struct {
	RequestID string    `json:"request_id"`
	TicketID  string    `json:"ticket_id"`
	Target    string    `json:"target"`
	Status    Status    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	Replayed  bool      `json:"replayed"`
	// Grouped: the request carried the fingerprint of a ticket still open,
	// and was stored as an occurrence of it (group.go): TicketID is that
	// ticket's, GroupedOn the request_id of its first report, Occurrences
	// this report's number among them (2 for the first repeat).
	Grouped     bool   `json:"grouped,omitempty"`
	GroupedOn   string `json:"grouped_on,omitempty"`
	Occurrences int    `json:"occurrences,omitempty"`
	// TicketLink is, for a grouped report, where its ticket was delivered
	// when the store answered (zero before). Not stored.
	TicketLink Link `json:"-"`
	// Live is, on a replay, where the request stands now (what Find would
	// answer), read in the same transaction; nil on a first call. Not
	// stored.
	Live *Report `json:"-"`
}

// ErrConflict is wrapped by ConflictError.
var ErrConflict = errors.New("request_id reused with different arguments")

// ConflictError reports a request id that was first used with other
// arguments (IETF Idempotency-Key draft: 422). What the caller may do
// next is said by the front that answers it.
type ConflictError struct {
	RequestID string
	TicketID  string
	Tool      string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("request_id %q was already used with different arguments for ticket %s (tool %s); nothing was written",
		e.RequestID, e.TicketID, e.Tool)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// ErrOtherSubject: the scoped id of a request (ticket.ScopedID) names
// another subject's request. Only an anonymous request_id that spells
// "subject:id" can meet it; the answer says nothing of the other request.
var ErrOtherSubject = errors.New("request_id is in use by another caller; nothing was written")

// ErrStale: the delivery record is no longer at the version the writer read;
// another copy of the message (or an operator) changed it first, and the
// write was not made.
var ErrStale = errors.New("the delivery record changed since it was read")

// ErrNotFound is returned for a request id the store does not hold.
var ErrNotFound = errors.New("no such request")

// ErrState is returned when an operator action does not fit the request's state.
var ErrState = errors.New("the request is not in a state that allows this")

// Link is where a downstream has an item: its id and, if it gives one, a
// URL.
type Link struct {
	ExternalID, ExternalURL string
}
