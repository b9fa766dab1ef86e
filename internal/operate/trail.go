package operate

import (
	"context"
	"errors"
	"strings"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/trail"
	"ticketrelay/ticket"
)

// TrailRecorder records operator actions (the commands', the console's)
// in the database's audit trail, and lists a request's entries for the
// console.
type TrailRecorder struct{ Store *trail.Store }

func (r TrailRecorder) Record(ctx context.Context, e Entry) error {
	return r.Store.Record(ctx, TrailEntry(e))
}

// ForRequest is the trail's entries of a request: the calls that named
// it and the operators' actions on it.
func (r TrailRecorder) ForRequest(ctx context.Context, scopedID string) ([]trail.Entry, error) {
	return r.Store.ForRequest(ctx, scopedID)
}

// TrailEntry is the trail's entry of an operator action: its outcome a
// refusal (failed: no such request, not in a state for it, a host not
// finished) or an error, and its reason what the action named beside the
// request, or why it did not happen.
func TrailEntry(e Entry) trail.Entry {
	t := trail.Entry{Time: e.At, Kind: trail.KindOperator, Subject: e.Subject, Action: e.Action,
		RequestID: e.RequestID, Outcome: trail.Done}
	if t.Time.IsZero() {
		t.Time = time.Now()
	}
	if e.RequestID != "" {
		t.TicketID = ticket.IDFor(e.RequestID)
	}
	switch e.Action {
	case ActionResolve:
		t.Reason = "settled as failed"
		if e.Target != "" {
			t.Reason = "settled as delivered, external id " + e.Target
		}
	case ActionForgetHost:
		t.Reason = "host " + e.Target
	}
	if e.Err != nil {
		t.Outcome = trail.Failed
		if e.Action != ActionForgetHost && !errors.Is(e.Err, request.ErrNotFound) && !errors.Is(e.Err, request.ErrState) {
			t.Outcome = trail.Error
		}
		t.Reason = trail.Entry{Reason: strings.TrimPrefix(t.Reason+": ", ": ") + e.Err.Error()}.Clean().Reason
	}
	return t
}
