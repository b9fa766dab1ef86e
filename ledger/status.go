package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
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

// Delivery states stored in the deliveries table. "attempting" is recorded
// before a call to a downstream without a dedupe key, so that a crash during
// the call is never followed by a blind second call.
const (
	DeliveryAttempting = "attempting"
)

// RequestStatus is what find_request reports, as JSON. Only request_id,
// status and detail are always present; the other fields appear when they
// apply (mcpserver's find_request output schema describes each of them).
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
	Detail        string     `json:"detail"`                    // what the status means and what to do next
	scoped        string     // the name operators know it by (ticket.ScopedID), for the detail's commands
}

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
		st.Detail = detail(st)
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("ledger: find %s: %w", shown, err)
	}
	row.fill(&st)
	if err := l.explain(ctx, &st); err != nil {
		return st, err
	}
	return st, nil
}

// statusColumns and statusJoins read where a request stands in one query:
// its ledger row, outbox row and delivery record (see statusRow). Find
// uses them, and so does a replayed create, inside the writer's
// transaction, where it reads the ledger row anyway.
const (
	statusColumns = `r.ticket_id, r.tool, r.target, r.created_at, o.published_at,
		d.state, d.attempts, d.throttled, d.next_attempt_at, d.last_error, d.external_id, d.external_url, d.updated_at`
	statusJoins = `FROM requests r LEFT JOIN outbox o ON o.id = r.id LEFT JOIN deliveries d ON d.id = r.id`
)

// statusRow holds the columns of statusColumns that are not RequestStatus
// fields as they are.
type statusRow struct {
	created                                   int64
	published, attempts, throttled, next, upd sql.NullInt64
	state, lastErr, extID, extURL             sql.NullString
}

// dest is the Scan destination of statusColumns, filling st and r.
func (r *statusRow) dest(st *RequestStatus) []any {
	return []any{&st.TicketID, &st.Tool, &st.Target, &r.created, &r.published,
		&r.state, &r.attempts, &r.throttled, &r.next, &r.lastErr, &r.extID, &r.extURL, &r.upd}
}

// fill sets st's status and delivery fields from the row.
func (r *statusRow) fill(st *RequestStatus) {
	st.AcceptedAt = timePtr(r.created)
	if r.published.Valid {
		st.PublishedAt = timePtr(r.published.Int64)
	}
	if !r.state.Valid {
		st.settle(nil)
		return
	}
	d := Delivery{State: r.state.String, Attempts: int(r.attempts.Int64), Throttled: int(r.throttled.Int64),
		LastError: r.lastErr.String, ExternalID: r.extID.String, ExternalURL: r.extURL.String,
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
		AcceptedAt: &accepted, PublishedAt: published, scoped: t.Scoped()}
	st.settle(d)
	st.Detail = detail(st)
	return st
}

// explain writes st's detail: what the status means and what to do next,
// and, for a request still on its way, whether anyone will deliver it.
func (l *Ledger) explain(ctx context.Context, st *RequestStatus) error {
	st.Detail = detail(*st)
	if st.Status == StatusQueued || st.Status == StatusPublished || st.Status == StatusRetrying {
		served, err := l.servedRecently(ctx)
		if err != nil {
			return err
		}
		st.Detail += served.Unserved(st.Target) + served.Blocked()
	}
	return nil
}

// detailUnknown is the detail of StatusUnknown. It names no tool: create
// tools are named by configuration.
const detailUnknown = "No request with this request_id has been stored: never accepted, still being stored by a call in progress, " +
	"or forgotten after its retention. Calling the same create tool again with the SAME request_id and arguments is always safe " +
	"(it never makes a second ticket); do not use a new request_id for this ticket."

func detail(st RequestStatus) string {
	switch st.Status {
	case StatusUnknown:
		return detailUnknown
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
		return failedDetail(st)
	case StatusUncertain:
		return uncertainDetail(st)
	}
	return ""
}

// contentRejected matches the last error of a request the downstream
// refused with a 4xx other than an auth error (those are "auth error"): a
// refusal that may be about the ticket's content.
var contentRejected = regexp.MustCompile(`^permanent error \(HTTP 4\d\d\)`)

// failedDetail says what happened, from the last error the forwarder
// recorded, and what the agent and an operator can do next. It never says
// "permanently" of a request whose attempts may have reached the downstream.
func failedDetail(st RequestStatus) string {
	cmd := "`dispatcher redrive -data DIR " + st.operatorName() + "`"
	redrive := "redrive it with " + cmd + ", which resends it under the same dedupe key."
	switch e := st.LastError; {
	case contentRejected.MatchString(e):
		return "Delivery to " + st.Target + " failed: " + st.Target + " rejected it (" + e + "). " +
			"If the error is about the ticket's content, fix the arguments and create it with a NEW request_id " +
			"(calling again with this one only repeats this answer). Otherwise (e.g. a configuration problem) do not create it again: " +
			"an operator can " + redrive
	case strings.HasPrefix(e, "auth error"):
		return "Delivery to " + st.Target + " failed: " + st.Target + " refused ticketrelay's credentials (" + e + "). " +
			"An operator must fix them and can then " + redrive +
			" Do not create it again with a new request_id: once redriven, it would be a second ticket."
	case strings.Contains(e, "attempts exhausted"):
		return "Delivery to " + st.Target + " stopped after its attempts were exhausted (" + e + "). " +
			"An attempt that timed out or got a server error may still have reached " + st.Target + ", so it may hold the ticket: " +
			"do not create it again with a new request_id. An operator can " + redrive
	case strings.HasPrefix(e, "settled as not delivered"):
		return "An operator checked " + st.Target + " and settled this request as not delivered (" + e + "). " +
			"If it was already created again with a new request_id, nothing more is needed. Otherwise either create it with a NEW request_id, " +
			"or have an operator redrive this one with " + cmd + ": one of the two, not both."
	}
	return "Delivery to " + st.Target + " failed (" + st.LastError + "). An operator can " + redrive +
		" Do not create it again with a new request_id: " + st.Target + " may hold it (a timeout or server error may have reached it)."
}

// uncertainDetail names what to check, what an operator runs, and what the
// agent does if the downstream holds nothing.
func uncertainDetail(st RequestStatus) string {
	return "The outcome of an attempt to deliver to " + st.Target + " is unknown (" + st.LastError + "), and " + st.Target +
		" offers no way to check it automatically, so it is not resent. Check " + st.Target + " for ticket " + st.TicketID +
		" (look for its title) before creating it again. If it is there, do not create it again: an operator records it with " +
		"`dispatcher resolve -data DIR " + st.operatorName() + " -delivered EXTERNAL_ID`. If it is not, create it with a NEW request_id " +
		"(calling again with this one only repeats this answer), and an operator settles this one with " +
		"`dispatcher resolve -data DIR " + st.operatorName() + " -failed`."
}

// operatorName is the name the dispatcher's commands take for st: its
// scoped id (ticket.ScopedID).
func (st RequestStatus) operatorName() string { return cmp.Or(st.scoped, st.RequestID) }

func timePtr(ns int64) *time.Time {
	t := time.Unix(0, ns).UTC()
	return &t
}
