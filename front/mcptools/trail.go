package mcptools

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/metrics"
	"ticketrelay/store/trail"
	"ticketrelay/ticket"
)

// callRefused is the outcome of a call byGrant refused (it has no metric
// word: ToolRefused counts it).
const callRefused = "refused"

// trailOutcomes maps the outcome words of the handlers to the trail's.
var trailOutcomes = map[string]string{
	metrics.CallCreated:  trail.Accepted,
	metrics.CallReplayed: trail.Replayed,
	metrics.CallConflict: trail.Conflict,
	metrics.CallInvalid:  trail.Invalid,
	metrics.CallError:    trail.Error,
	metrics.CallOK:       trail.OK,
	callRefused:          trail.Refused,
}

// request notes the request a call names, as the trail records it: its
// scoped id, if the request_id given is one (a malformed id is not kept).
func (o *outcome) request(subject, requestID string) {
	if ticket.ValidateRequestID(requestID) == nil {
		o.requestID = ticket.ScopedID(subject, requestID)
	}
}

// record is the receiving middleware that records every tool call in the
// audit trail once it is answered: who called (subject, client), which
// tool and request, the outcome and the ticket. It is outermost among the
// tools' middleware, so that byGrant's refusals are recorded too, and
// hands the call's outcome down to the handlers through the context. The
// recorder only queues the entry: the answer never waits for the trail.
func record(tr trail.Recorder, now func() time.Time) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		if tr == nil {
			return next
		}
		if now == nil {
			now = time.Now
		}
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if !ok || call.Params == nil {
				return next(ctx, method, req)
			}
			at := now()
			o := &outcome{}
			res, err := next(context.WithValue(ctx, outcomeKey{}, o), method, req)
			e := trail.Entry{Time: at, Kind: trail.KindCall, Subject: callerSubject(call), Tool: call.Params.Name,
				RequestID: o.requestID, TicketID: o.ticketID, Outcome: trailOutcomes[o.word], Reason: o.reason}
			if o.word == metrics.CallInvalid {
				e.Reason = o.argument
			}
			if e.Outcome == "" {
				// No handler of ours ran: the SDK refused the call.
				e.Outcome, e.Reason = trail.Invalid, "no such tool"
			}
			if ci := call.ClientInfo(); ci != nil {
				e.Client, e.ClientVersion = ci.Name, ci.Version
			}
			_ = tr.Record(ctx, e) // a full queue is counted and noted by the recorder
			return res, err
		}
	}
}
