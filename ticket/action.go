package ticket

import (
	"encoding/json"
	"strings"
)

// Kinds of request beyond create: a comment on a ticket, and an update
// that sets some of its fields. A request without a kind is a create, and
// so is every ledger row, outbox row and message written before kinds
// existed.
const (
	KindCreate  = ""
	KindComment = "comment"
	KindUpdate  = "update"
)

// Action is what a comment or an update acts on and does; the zero Action
// is a create's. Its JSON is part of a Request's, and so of its Hash: a
// create's hashes as it always did.
type Action struct {
	Kind string `json:"kind,omitempty"`
	// On is the scoped id (ScopedID) of the create whose ticket the
	// request acts on, when ticketrelay filed it: delivery waits for that
	// create's, and uses its external id. "" for a ticket ticketrelay did
	// not file: then Ref names it.
	On string `json:"on,omitempty"`
	// Ref is the downstream's own key or URL of a ticket ticketrelay did
	// not file, as the caller gave it (the target's adapter reads it).
	Ref string `json:"ref,omitempty"`
	// Set is an update's fields, as downstream.Update's JSON (checked
	// against the target's fields by the front).
	Set json.RawMessage `json:"set,omitempty"`
}

// NormalizeComment validates a comment request: its id, its ticket and its
// body (Body), which must say something. The body may not carry the mark
// ticketrelay finds its own comments by (ReservedTitleMarker): a comment
// that did could pass for another request's delivery.
func (r *Request) NormalizeComment() error {
	if err := r.normalizeAction(KindComment); err != nil {
		return err
	}
	if err := checkText("body", r.Body, 0, true); err != nil {
		return err
	}
	if strings.TrimSpace(r.Body) == "" {
		return invalid("body", "is required: the comment's text")
	}
	if len(r.Body) > MaxBodyLen {
		return invalid("body", "is %d bytes long; at most %d are allowed", len(r.Body), MaxBodyLen)
	}
	if containsFold(r.Body, ReservedTitleMarker) {
		return invalid("body", "contains %q, which is reserved: ticketrelay marks its own comments with it to find them again; reword it", ReservedTitleMarker)
	}
	return nil
}

// NormalizeUpdate validates an update request's id and ticket; its fields
// (Set) are the front's to check against the target.
func (r *Request) NormalizeUpdate() error {
	if err := r.normalizeAction(KindUpdate); err != nil {
		return err
	}
	if len(r.Set) == 0 {
		return invalid("set", "is required")
	}
	return nil
}

func (r *Request) normalizeAction(kind string) error {
	if err := ValidateRequestID(r.RequestID); err != nil {
		return err
	}
	r.Kind, r.Title, r.Priority, r.Labels = kind, "", "", nil
	if (r.On == "") == (r.Ref == "") {
		return invalid("ticket", "is required: the ticket_id or request_id a create answered, or the downstream's own key or URL")
	}
	if r.Ref != "" {
		if err := checkText("ticket", r.Ref, MaxTitleLen, false); err != nil {
			return err
		}
	}
	return nil
}

// TicketID is the ticket id of r's ticket: derived from its scoped id for
// a create, the create's for a comment or an update on a ticket
// ticketrelay filed, none for one on a ticket it did not.
func (r *Request) TicketID() string {
	switch {
	case r.Kind == KindCreate:
		return IDFor(r.Scoped())
	case r.On != "":
		return IDFor(r.On)
	}
	return ""
}
