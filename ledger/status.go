package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"ticketrelay/outbox"
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

// Delivery states stored in the deliveries table. "attempting" is recorded
// before a call to a downstream without a dedupe key, so that a crash during
// the call is never followed by a blind second call.
const (
	DeliveryAttempting = "attempting"
)

// RequestStatus is what find_request reports, as JSON. Only request_id,
// status and detail are always present; the other fields appear when they
// apply (mcptools' find_request output schema describes each of them).
type RequestStatus struct {
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
	// Detail says what the status means and what to do next. The ledger
	// leaves it empty: the front that answers the agent writes it from the
	// fields above and below.
	Detail string `json:"detail"`

	// What the front writes the detail from, beside the fields above; not
	// on the wire (see the methods of the same names).
	scoped      string
	failure     Failure
	served      *Served
	interrupted bool
}

// Failure is the class of a failed delivery (see Failure).
func (st RequestStatus) Failure() Failure { return st.failure }

// Served is, for a request still on its way (queued, published or
// retrying), what the running dispatchers deliver to; nil otherwise.
func (st RequestStatus) Served() *Served { return st.served }

// Interrupted reports that no host accepted the request, but a call
// claimed it in the cluster record and was cut off (or is still running):
// a repeat with the same arguments completes it (clusterrec.Front.Find).
func (st RequestStatus) Interrupted() bool { return st.interrupted }

// InterruptedStatus is the status of such a request (see Interrupted).
func InterruptedStatus(requestID string) RequestStatus {
	return RequestStatus{RequestID: requestID, Status: StatusUnknown, interrupted: true}
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

// Find reports the status of subject's requestID. An id never accepted is
// StatusUnknown, not an error, and so is another subject's.
func (l *Ledger) Find(ctx context.Context, subject, requestID string) (RequestStatus, error) {
	scoped := ticket.ScopedID(subject, requestID)
	return l.find(ctx, requestID, scoped, `r.request_id = ? AND r.subject = ?`, scoped, subject)
}

// FindScoped reports the status of the request whose scoped id
// (ticket.ScopedID) is id: operators name requests so, whoever made them.
func (l *Ledger) FindScoped(ctx context.Context, id string) (RequestStatus, error) {
	return l.find(ctx, id, id, `r.request_id = ?`, id)
}

// find reports the status of the request where selects, under the name
// shown; scoped is its scoped id.
func (l *Ledger) find(ctx context.Context, shown, scoped, where string, args ...any) (RequestStatus, error) {
	st := RequestStatus{RequestID: shown, Status: StatusUnknown, scoped: scoped}
	var row statusRow
	err := l.db.queryRow(ctx, `SELECT `+statusColumns+` `+statusJoins+` WHERE `+where, args...).Scan(row.dest(&st)...)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err == nil {
		err = row.readPublished(ctx, l.db.read)
	}
	if err != nil {
		return st, fmt.Errorf("ledger: find %s: %w", shown, err)
	}
	row.fill(&st)
	if err := l.addServed(ctx, &st); err != nil {
		return st, err
	}
	return st, nil
}

// statusColumns and statusJoins read where a request stands: its ledger
// row and delivery record (see statusRow); when the outbox published it,
// the outbox's own query answers (readPublished). Find uses them, and so
// does a replayed create, inside the writer's transaction, where it reads
// the ledger row anyway.
const (
	statusColumns = `r.id, r.subject, r.caller_name, r.caller_email, r.ticket_id, r.tool, r.target, r.created_at,
		d.state, d.attempts, d.throttled, d.next_attempt_at, d.last_error, d.failure, d.external_id, d.external_url, d.updated_at`
	statusJoins = `FROM requests r LEFT JOIN deliveries d ON d.id = r.id`
)

// statusRow holds the columns of statusColumns that are not RequestStatus
// fields as they are.
type statusRow struct {
	id, created                            int64
	caller                                 ticket.Caller
	published                              time.Time // zero: not published
	attempts, throttled, next, upd         sql.NullInt64
	state, lastErr, failure, extID, extURL sql.NullString
}

// dest is the Scan destination of statusColumns, filling st and r.
func (r *statusRow) dest(st *RequestStatus) []any {
	return []any{&r.id, &r.caller.Subject, &r.caller.Name, &r.caller.Email, &st.TicketID, &st.Tool, &st.Target, &r.created,
		&r.state, &r.attempts, &r.throttled, &r.next, &r.lastErr, &r.failure, &r.extID, &r.extURL, &r.upd}
}

// readPublished reads when the request's outbox row was published.
func (r *statusRow) readPublished(ctx context.Context, q outbox.Querier) error {
	at, _, err := outbox.PublishedAt(ctx, q, r.id)
	r.published = at
	return err
}

// fill sets st's status and delivery fields from the row.
func (r *statusRow) fill(st *RequestStatus) {
	st.AcceptedAt = timePtr(r.created)
	st.Caller = r.caller.OrNil()
	if !r.published.IsZero() {
		st.PublishedAt = timePtr(r.published.UnixNano())
	}
	if !r.state.Valid {
		st.settle(nil)
		return
	}
	d := Delivery{State: r.state.String, Attempts: int(r.attempts.Int64), Throttled: int(r.throttled.Int64),
		LastError: r.lastErr.String, Failure: Failure(r.failure.String), ExternalID: r.extID.String, ExternalURL: r.extURL.String,
		UpdatedAt: time.Unix(0, r.upd.Int64).UTC()}
	if r.next.Valid {
		d.NextAttemptAt = time.Unix(0, r.next.Int64).UTC()
	}
	st.settle(&d)
}

// settle sets st's status and delivery fields from its delivery record d
// (nil: none yet) and st.PublishedAt.
func (st *RequestStatus) settle(d *Delivery) {
	switch {
	case d != nil:
		st.Attempts, st.Throttled = d.Attempts, d.Throttled
		st.LastError, st.ExternalID, st.ExternalURL = d.LastError, d.ExternalID, d.ExternalURL
		st.failure = d.Failure
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
	case st.PublishedAt != nil:
		st.Status = StatusPublished
	default:
		st.Status = StatusQueued
	}
}

// StatusOf is what find_request reports of a request known from outside
// this ledger (the cluster record of a multi-host installation): its
// ticket t (Request.RequestID as the caller gave it), when it was
// accepted, when it was published (nil: not known) and its delivery record
// (nil: none yet).
func StatusOf(t ticket.Ticket, accepted time.Time, published *time.Time, d *Delivery) RequestStatus {
	st := RequestStatus{RequestID: t.RequestID, TicketID: t.ID, Tool: t.Tool, Target: t.Target,
		AcceptedAt: &accepted, PublishedAt: published, Caller: t.Caller.OrNil(), scoped: t.Scoped()}
	st.settle(d)
	return st
}

// OnItsWay reports whether the request is still on its way to delivery:
// whether a running dispatcher will deliver it matters.
func (st RequestStatus) OnItsWay() bool {
	return st.Status == StatusQueued || st.Status == StatusPublished || st.Status == StatusRetrying
}

// addServed sets, for a request still on its way, what the running
// dispatchers deliver to.
func (l *Ledger) addServed(ctx context.Context, st *RequestStatus) error {
	if !st.OnItsWay() {
		return nil
	}
	served, err := l.servedRecently(ctx)
	if err != nil {
		return err
	}
	st.served = &served
	return nil
}

// OperatorName is the name the dispatcher's commands take for st: its
// scoped id (ticket.ScopedID).
func (st RequestStatus) OperatorName() string { return cmp.Or(st.scoped, st.RequestID) }

// callerOf is the caller of a ledger row: its subject, and the name and
// email recorded with it.
func callerOf(subject, name, email string) ticket.Caller {
	return ticket.Caller{Subject: subject, Name: name, Email: email}
}

func timePtr(ns int64) *time.Time {
	t := time.Unix(0, ns).UTC()
	return &t
}
