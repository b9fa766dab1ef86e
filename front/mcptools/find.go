package mcptools

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcpauth"
	"ticketrelay/metrics"
	"ticketrelay/ticket"
)

type findArgs struct {
	RequestID string `json:"request_id"`
}

func (s *Server) findHandler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	o := outcomeOf(ctx)
	var a findArgs
	if err := decodeArgs(req.Params.Arguments, &a); err != nil {
		return findInvalid(o, err), nil
	}
	if err := validateFindID(a.RequestID); err != nil {
		return findInvalid(o, err), nil
	}
	o.request(callerSubject(req), a.RequestID)
	st, err := s.ledger.Find(ctx, callerSubject(req), a.RequestID)
	if err != nil {
		s.log.Error("find failed", "request_id", a.RequestID, "err", err)
		o.reason = "storage error"
		return toolError(fmt.Sprintf("could not read the status (%v); try again", err)), nil
	}
	o.word, o.ticketID = metrics.CallOK, st.TicketID
	return jsonResult(advised(st))
}

// callerSubject is the subject a call's request_id belongs to: its bearer
// token's subject, or the anonymous subject ("") without tokens (stdio, or
// HTTP with no -tokens).
func callerSubject(req *mcp.CallToolRequest) string {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		return req.Extra.TokenInfo.UserID
	}
	return ""
}

// callerRecord is who makes the call, as the ticket records it: the
// subject the request belongs to and, for a signed-in user, the display
// name and email their token carries. The token itself stays here.
func callerRecord(req *mcp.CallToolRequest) ticket.Caller {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return ticket.Caller{}
	}
	c := ticket.Caller{Subject: req.Extra.TokenInfo.UserID}
	if p, ok := mcpauth.FromTokenInfo(req.Extra.TokenInfo); ok {
		c.Name, c.Email = p.Name, p.Email
	}
	return c.Clean()
}

// requestIDFormat is what a request_id looks like, for find_request's errors.
var requestIDFormat = fmt.Sprintf("a request_id is the one given to the create tool: 1 to %d visible ASCII characters, no spaces",
	ticket.MaxRequestIDLen)

// validateFindID checks find_request's request_id. The create tools' advice
// about fresh ids does not apply to a read.
func validateFindID(id string) error {
	if id == "" {
		return &ticket.InvalidError{Argument: "request_id", Reason: "is required"}
	}
	return ticket.ValidateRequestID(id)
}

// findInvalid answers a find_request call with malformed arguments. It
// only reads, so it says nothing about writes.
func findInvalid(o *outcome, err error) *mcp.CallToolResult {
	arg := o.reject(err)
	msg := err.Error()
	if arg == "request_id" {
		msg = "the request_id is malformed: " + msg + "; " + requestIDFormat + "."
	}
	return toolError(msg)
}
