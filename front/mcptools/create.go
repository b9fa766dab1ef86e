package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/advice"
	"ticketrelay/internal/failpoint"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/ticket"
	"ticketrelay/tracing"
)

type createArgs struct {
	RequestID string   `json:"request_id"`
	Title     string   `json:"title"`
	Body      string   `json:"body"`
	Priority  string   `json:"priority"`
	Labels    []string `json:"labels"`
	// Fingerprint groups repeated reports (fingerprint.go).
	Fingerprint string `json:"fingerprint"`
	// WaitForDelivery is not part of the request's identity (not in
	// ticket.Request, so not in its hash): a retry that waits still replays.
	WaitForDelivery int `json:"wait_for_delivery_seconds"`
}

// decodeCreate decodes and validates the arguments of b's create tool into
// the normalized request (and the arguments that are not part of it).
func decodeCreate(b Binding, raw json.RawMessage) (ticket.Request, createArgs, error) {
	var a createArgs
	own, given, err := splitFields(b, raw)
	if err != nil {
		return ticket.Request{}, a, err
	}
	if err := decodeArgs(own, &a); err != nil {
		return ticket.Request{}, a, err
	}
	r := ticket.Request{RequestID: a.RequestID, Tool: b.Tool, Target: b.Target,
		Title: a.Title, Body: a.Body, Priority: a.Priority, Labels: a.Labels, Fingerprint: a.Fingerprint}
	if err := r.Normalize(); err != nil {
		return r, a, labelItem(a.Labels, err)
	}
	if err := r.Values(b.Fields, given); err != nil {
		return r, a, err
	}
	if err := ticket.ValidateFingerprint(r.Fingerprint); err != nil {
		return r, a, err
	}
	return r, a, checkWait(a.WaitForDelivery)
}

// labelItem turns Normalize's error about one of the labels into one that
// names it by index (labels[2]). Only invalid calls pay for it.
func labelItem(labels []string, err error) error {
	var ie *ticket.InvalidError
	if !errors.As(err, &ie) || ie.Argument != "labels" || len(labels) > ticket.MaxLabels {
		return err
	}
	for i, l := range labels {
		one := ticket.Request{RequestID: "-", Title: "-", Labels: []string{l}}
		var e *ticket.InvalidError
		if errors.As(one.Normalize(), &e) && e.Argument == "labels" {
			reason := e.Reason
			if strings.TrimSpace(l) == "" {
				reason = "is empty (or only spaces)"
			}
			return &ticket.InvalidError{Argument: fmt.Sprintf("labels[%d]", i), Reason: reason}
		}
	}
	return err
}

// createResult is a create tool's answer: the ledger's result with, where
// known, the request's current status, where it was delivered and what it
// means.
type createResult struct {
	request.Result
	ExternalID  string `json:"external_id,omitempty"`
	ExternalURL string `json:"external_url,omitempty"`
	Detail      string `json:"detail,omitempty"`
	// Caller is who asked, as the first call recorded it: a replay from
	// another client of the same user answers the first call's.
	Caller *ticket.Caller `json:"caller,omitempty"`
}

// acceptedDetail is the detail of a first call's answer.
func acceptedDetail(target string) string {
	return "Accepted and stored; delivery to " + target + " is asynchronous: find_request (or wait_for_delivery_seconds) " +
		"reports when it is delivered and its id/URL. Do not create it again."
}

// now sets what st, the request's status as find_request gives it, says
// of it now: the status, where it was delivered, what it means.
func (c *createResult) now(st request.Report) {
	c.Status, c.ExternalID, c.ExternalURL, c.Detail = st.Status, st.ExternalID, st.ExternalURL, advice.Advise(st)
	if st.Caller != nil {
		c.Caller = st.Caller
	}
}

// current is the answer to a replayed call: the first call's result with
// the status the ledger read in the same statement that found it
// (Result.Live).
func (s *Server) current(res request.Result) createResult {
	out := createResult{Result: res}
	if res.Live != nil {
		out.now(*res.Live)
	}
	return out
}

func (s *Server) createHandler(b Binding) mcp.ToolHandler {
	accepted := acceptedDetail(b.Target)
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		o := outcomeOf(ctx)
		r, a, err := decodeCreate(b, req.Params.Arguments)
		o.request(callerSubject(req), r.RequestID)
		if err != nil {
			return invalid(o, err), nil
		}
		r.Subject = callerSubject(req)
		r.Caller = callerRecord(req)
		res, err := s.accept(ctx, r)
		if err != nil {
			return s.notCreated(ctx, o, b.Tool, r.RequestID, err), nil
		}
		failpoint.Hit(failpoint.FrontAfterCommit) // committed, not yet answered
		tracing.Request(ctx, r.Scoped(), res.TicketID, b.Target)
		o.word, o.ticketID = metrics.CallCreated, res.TicketID
		if res.Replayed {
			o.word = metrics.CallReplayed
		}
		out := createResult{Result: res, Detail: accepted, Caller: r.Caller.OrNil()}
		switch {
		case a.WaitForDelivery > 0:
			out = s.awaitDelivery(ctx, req, r.Subject, res, time.Duration(a.WaitForDelivery)*time.Second)
		case res.Replayed:
			out = s.current(res)
		}
		if res.Grouped {
			s.joined(&out)
		}
		return jsonResult(out)
	}
}

// notCreated answers a create of tool that the store refused or could not
// confirm (err), saying whether anything may have been stored and what to
// do next.
func (s *Server) notCreated(ctx context.Context, o *outcome, tool, requestID string, err error) *mcp.CallToolResult {
	var conflict *request.ConflictError
	switch {
	case errors.As(err, &conflict):
		o.word, o.ticketID = metrics.CallConflict, conflict.TicketID
		return toolError(conflictAdvice(conflict))
	case errors.Is(err, request.ErrOtherSubject):
		o.word, o.reason = metrics.CallConflict, "another subject's request_id"
		return toolError(otherSubjectAdvice)
	case errors.Is(err, clusterrec.ErrInProgress):
		// Multi-host: another host claimed it and is still committing.
		o.reason = "in progress on another host"
		return toolError("idempotency_key_in_progress: another host is still accepting this request_id. " +
			"Repeat this call with the same request_id and arguments in a few seconds: it will return that result.")
	case errors.Is(err, clusterrec.ErrFull):
		o.reason = "cluster record full"
		s.log.ErrorContext(ctx, "create refused: the cluster record is full", "tool", tool, "err", err)
		return toolError("the ticket was not accepted: ticketrelay's cluster record is full (an operator must act); " +
			"nothing was written. Tell the user; retrying will not help until it is fixed.")
	case errors.Is(err, clusterrec.ErrOrphaned):
		o.reason = "dispatcher not running"
		s.log.WarnContext(ctx, "create refused: this host's dispatcher is not running", "tool", tool, "request_id", requestID)
		return toolError("the ticket was not accepted: this ticketrelay host cannot deliver right now (its dispatcher is not " +
			"running). Retry with the SAME request_id and arguments: another host will take it; it never makes a second ticket.")
	case errors.Is(err, clusterrec.ErrUnavailable) && ctx.Err() == nil:
		// No quorum or an election that outlasted the call: the claim was
		// not decided, and a retry with the same request_id is safe.
		o.reason = "cluster record unavailable"
		s.log.WarnContext(ctx, "create refused: the cluster record is unavailable", "tool", tool, "request_id", requestID, "err", err)
		return toolError("the ticket was not accepted: the cluster that decides acceptance is unavailable (no quorum, or a " +
			"leader election in progress). Retry in a few seconds with the SAME request_id and arguments; it never makes a " +
			"second ticket.")
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The write was queued and completes without its caller: do not
		// claim that nothing was written.
		o.reason = "caller gone before the commit was confirmed"
		s.log.WarnContext(ctx, "create abandoned by its caller", "tool", tool, "request_id", requestID, "err", err)
		return toolError(fmt.Sprintf("the call ended before the ticket was confirmed (%v); it may have been stored. "+
			"Call find_request with the same request_id, and retry only with the same request_id and arguments.", err))
	default:
		// The ledger could not confirm the write (busy, closing): it may
		// or may not have committed.
		o.reason = "storage error"
		s.log.ErrorContext(ctx, "create failed", "tool", tool, "request_id", requestID, "err", err)
		return toolError(fmt.Sprintf("the ticket may not have been stored (%v). Call find_request with the same request_id: "+
			"it tells whether it was. Repeating this call with the same request_id and arguments is safe too (it never makes "+
			"a second ticket); do not use a new request_id.", err))
	}
}
