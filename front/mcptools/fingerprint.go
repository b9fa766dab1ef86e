package mcptools

// Fingerprinted creates (decision 0195): create_ticket's optional
// fingerprint groups repeated reports of one problem onto one open ticket.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// Grouper is the part of a store that groups fingerprinted creates: the
// ledger on one host (one writer transaction decides), clusterrec.Front
// on many (the cluster record decides).
type Grouper interface {
	Group(ctx context.Context, req ticket.Request, g request.Grouping) (request.Result, error)
}

// GroupCloser is a store whose groups end by a call once a closing update
// is accepted (the cluster record's). The ledger needs none: the update's
// own transaction ends the group.
type GroupCloser interface {
	CloseGroup(ctx context.Context, on string) error
}

var fingerprintArg = map[string]any{
	"type": "string", "minLength": 1, "maxLength": ticket.MaxFingerprintLen,
	"description": "Optional: a stable name for the problem this ticket reports (e.g. \"checkout-500\", a hash of the error). While a " +
		"ticket filed with the same fingerprint is open, a report under a NEW request_id adds an occurrence comment to that ticket " +
		"instead of filing another, and answers grouped: true with that ticket's id and the occurrence count. One line, " +
		"at most 255 bytes.",
}

// Fields of a grouped answer (createOutputSchema) and of find_request's.
var (
	groupedOut     = map[string]any{"type": "boolean", "description": "true if the fingerprint named an open ticket: this report was added to it as an occurrence (ticket_id is that ticket's) instead of filing a new one."}
	groupedOnOut   = schemaString("For a grouped report: the request_id that filed the ticket it joined.")
	occurrencesOut = schemaCount("For a grouped report: its number among the reports of the ticket (the first report is 1).")
	fingerprintOut = schemaString("The fingerprint the request was filed with.")
)

// groupWindow is how long target's tickets take occurrences.
func (s *Server) groupWindow(target string) time.Duration {
	if w := s.groupWindows[target]; w > 0 {
		return w
	}
	return request.DefaultGroupWindow
}

// accept stores r: through the store's grouping when it carries a
// fingerprint, else as a plain create.
func (s *Server) accept(ctx context.Context, r ticket.Request) (request.Result, error) {
	if r.Fingerprint == "" {
		return s.ledger.Create(ctx, r)
	}
	g, ok := s.ledger.(Grouper)
	if !ok {
		return request.Result{}, &ticket.InvalidError{Argument: "fingerprint", Reason: "is not supported by this store"}
	}
	return g.Group(ctx, r, request.Grouping{Window: s.groupWindow(r.Target), Comments: s.beyond[r.Target].Comments})
}

// joined completes the answer to a grouped report: where the ticket it
// joined was delivered (as the store read it with the report: a
// find_request of the ticket would list all its comments), and what
// happened.
func (s *Server) joined(out *createResult) {
	out.ExternalID, out.ExternalURL = out.TicketLink.ExternalID, out.TicketLink.ExternalURL
	what := "an occurrence comment is added to it"
	if !s.beyond[out.Target].Comments {
		what = out.Target + " takes no comments: the occurrence is counted here, and nothing more is written there"
	}
	// grouped_on and occurrences say the rest; an agent reads this text
	// (and pays for its tokens) on every repeated report.
	out.Detail = fmt.Sprintf("Grouped: occurrence %d of open ticket %s (same fingerprint); %s. find_request follows it. Do not file it again.",
		out.Occurrences, out.TicketID, what)
}

// closeGroup ends the group of the ticket a closing update r acts on,
// where the store needs a call for it.
func (s *Server) closeGroup(ctx context.Context, r ticket.Request) {
	gc, ok := s.ledger.(GroupCloser)
	if !ok || r.On == "" || !closes(r) {
		return
	}
	if err := gc.CloseGroup(ctx, r.On); err != nil {
		// The update is accepted; its replay tries again.
		s.log.WarnContext(ctx, "closing update accepted, but its fingerprint's group is still open", "request_id", r.RequestID, "err", err)
	}
}

// closes reports whether update r sets its ticket closed.
func closes(r ticket.Request) bool {
	var u downstream.Update
	return json.Unmarshal(r.Set, &u) == nil && u.Status == downstream.StatusClosed
}
