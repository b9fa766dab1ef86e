package downstream

// Beyond create: a comment on a ticket, and an update that sets some of its
// fields. Both are optional: a target that can do them implements
// Commenter or Updater next to Target.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"ticketrelay/ticket"
)

// TicketParser reads a reference to a ticket of the target: the external
// id or URL a create's Receipt gave, or the API's own key or URL for a
// ticket ticketrelay did not file. A reference to anything else (another
// host, project or repository, a malformed key) is a Permanent error
// naming the forms the target takes; nothing is called.
type TicketParser interface {
	ParseTicket(ref string) (Receipt, error)
}

// CommentDelivery is one attempt to add a comment to a ticket.
type CommentDelivery struct {
	Key     string // the dedupe key, derived from the comment's request id
	Attempt int    // 1 for the first attempt
	Ticket  string // the reference (see TicketParser)
	Body    string
	// AcceptedAt is when ticketrelay accepted the request: the same on
	// every attempt (zero: unknown).
	AcceptedAt time.Time
}

// CommentReceipt is the downstream's confirmation of a comment.
type CommentReceipt struct {
	ExternalID string // the comment's id (empty where the API gives none)
	URL        string // the comment's URL, or the ticket's where a comment has none
}

// Commenter is implemented by targets that add comments to tickets.
type Commenter interface {
	TicketParser
	// CommentCapabilities say what AddComment guarantees, as Capabilities
	// do for Deliver: a key the API dedupes on, or a lookup by the marker
	// each comment carries (see CommentFinder).
	CommentCapabilities() Capabilities
	// AddComment adds the comment. Errors should be *Error.
	AddComment(ctx context.Context, d CommentDelivery) (CommentReceipt, error)
}

// CommentFinder is implemented by commenters with a lookup: it finds the
// comment an earlier attempt with the same key wrote, by its marker.
type CommentFinder interface {
	FindComment(ctx context.Context, d CommentDelivery) (CommentReceipt, bool, error)
}

// Marker is the mark derived from a key that an adapter writes into a
// comment (or a subject) to find it again: "[ticketrelay:" and 24 hex
// digits of the key's SHA-256 and "]". Short (a key may hold 255
// characters), made of characters no filter or formatter treats specially,
// and not to be forged without knowing the key.
func Marker(key string) string {
	sum := sha256.Sum256([]byte(key))
	return ticket.ReservedTitleMarker + hex.EncodeToString(sum[:12]) + "]"
}

// FitComment cuts body so that body plus tail holds at most limit
// characters, saying so where it cut, and appends tail.
func FitComment(body, tail string, limit int) string {
	body = strings.TrimRight(body, " \n")
	room := limit - utf8.RuneCountInString(tail)
	if utf8.RuneCountInString(body) > room {
		note := fmt.Sprintf("\n\n… (the rest is cut: the API takes %d characters)", limit)
		body = string([]rune(body)[:max(room-utf8.RuneCountInString(note), 0)]) + note
	}
	return body + tail
}

// PrepareComment is what an AddComment starts with: the ticket c reads in
// d's reference, and a comment with something to say. Either error is
// Permanent.
func PrepareComment(c Commenter, d CommentDelivery) (Receipt, error) {
	r, err := c.ParseTicket(d.Ticket)
	if err != nil {
		return Receipt{}, err
	}
	return r, CheckComment(d)
}

// PrepareUpdate is what an Update starts with: the ticket u reads in d's
// reference, and d's update checked against u's fields (CheckUpdate).
func PrepareUpdate(u Updater, name string, d UpdateDelivery) (Receipt, Update, error) {
	r, err := u.ParseTicket(d.Ticket)
	if err != nil {
		return Receipt{}, Update{}, err
	}
	set, err := CheckUpdate(name, u.UpdateFields(), d.Set)
	return r, set, err
}

// CheckComment refuses a comment with nothing to say (Permanent).
func CheckComment(d CommentDelivery) error {
	if strings.TrimSpace(d.Body) == "" {
		return &Error{Class: Permanent, Err: errors.New("the comment is empty")}
	}
	return nil
}

// Field is a ticket field an update sets.
type Field string

const (
	FieldStatus   Field = "status"   // open or closed
	FieldPriority Field = "priority" // one of ticket.Priorities
	FieldLabels   Field = "labels"   // the whole set of labels
	FieldAssignee Field = "assignee" // the API's user reference; "" unassigns
)

// Fields are every field an update may name, in the order errors list them.
var Fields = []Field{FieldStatus, FieldPriority, FieldLabels, FieldAssignee}

// Status is a ticket's state as an update sets it.
type Status string

const (
	StatusOpen   Status = "open"
	StatusClosed Status = "closed"
)

// Update says what to set: every field it names is set to the given value,
// so that applying it twice leaves the ticket as applying it once does.
// A zero field is left as it is.
type Update struct {
	Status   Status    `json:"status,omitempty"`
	Priority string    `json:"priority,omitempty"`
	Labels   *[]string `json:"labels,omitempty"`   // the labels the ticket ends with (empty: none)
	Assignee *string   `json:"assignee,omitempty"` // "" unassigns
}

// Fields lists the fields u sets.
func (u Update) Fields() []Field {
	var fs []Field
	if u.Status != "" {
		fs = append(fs, FieldStatus)
	}
	if u.Priority != "" {
		fs = append(fs, FieldPriority)
	}
	if u.Labels != nil {
		fs = append(fs, FieldLabels)
	}
	if u.Assignee != nil {
		fs = append(fs, FieldAssignee)
	}
	return fs
}

// UpdateDelivery is one attempt to update a ticket.
type UpdateDelivery struct {
	Key     string // the dedupe key, derived from the update's request id
	Attempt int
	Ticket  string // the reference (see TicketParser)
	Set     Update
	// AcceptedAt is when ticketrelay accepted the request: the same on
	// every attempt (zero: unknown).
	AcceptedAt time.Time
}

// Updater is implemented by targets that update tickets.
type Updater interface {
	TicketParser
	// UpdateFields are the fields the API can set.
	UpdateFields() []Field
	// Update sets the fields. Errors should be *Error.
	Update(ctx context.Context, d UpdateDelivery) (Receipt, error)
}

// CheckUpdate validates u against the fields a target can set (have) and
// the values ticketrelay accepts, before anything is called: a field the
// API lacks, an update that sets nothing, a status other than open or
// closed, a priority not in ticket.Priorities or a label ticket.Normalize
// would refuse is a Permanent error saying what is wrong. It returns u with
// its labels as a create's are: trimmed, sorted, without repeats.
func CheckUpdate(target string, have []Field, u Update) (Update, error) {
	fs := u.Fields()
	if len(fs) == 0 {
		return u, permanent("an update of %s must set at least one of %s", target, joinFields(have))
	}
	var lacks []Field
	for _, f := range fs {
		if !slices.Contains(have, f) {
			lacks = append(lacks, f)
		}
	}
	if len(lacks) > 0 {
		return u, permanent("target %s cannot set %s: its API has no such field (it sets %s)", target, joinFields(lacks), joinFields(have))
	}
	if u.Status != "" && u.Status != StatusOpen && u.Status != StatusClosed {
		return u, permanent("status %q: want %q or %q", u.Status, StatusOpen, StatusClosed)
	}
	if u.Priority != "" && !slices.Contains(ticket.Priorities, u.Priority) {
		return u, permanent("priority %q: want one of %s", u.Priority, strings.Join(ticket.Priorities, ", "))
	}
	if u.Labels != nil {
		// The labels are checked as a create's are (count, length, reserved
		// prefixes): a request carrying them is normalized.
		r := ticket.Request{RequestID: "update", Tool: "update", Target: "t", Title: "update", Labels: *u.Labels}
		if err := r.Normalize(); err != nil {
			return u, &Error{Class: Permanent, Err: err}
		}
		labels := r.Labels
		if labels == nil {
			labels = []string{}
		}
		u.Labels = &labels
	}
	if u.Assignee != nil && (*u.Assignee != strings.TrimSpace(*u.Assignee) || Printable(*u.Assignee) != *u.Assignee) {
		return u, permanent("assignee %q: want a user reference without spaces around it or control characters", Printable(*u.Assignee))
	}
	return u, nil
}

func joinFields(fs []Field) string {
	if len(fs) == 0 {
		return "nothing"
	}
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

func permanent(format string, args ...any) *Error {
	return &Error{Class: Permanent, Err: fmt.Errorf(format, args...)}
}

// CheckRef is the reference check of a target whose tickets are named by
// the receiver's own ids: 1 to MaxKeyLen visible characters, no spaces.
func CheckRef(kind, name, ref string) error {
	if ref == "" || len(ref) > MaxKeyLen || strings.ContainsFunc(ref, func(r rune) bool { return r <= ' ' || Printable(string(r)) != string(r) }) {
		return BadTicket(kind, name, ref, fmt.Sprintf("the id or URL its create answered (1 to %d visible characters, no spaces)", MaxKeyLen))
	}
	return nil
}

// TicketNumber reads s as an API's ticket number: a positive decimal,
// written plainly (123 or #123; not 0123, +123 or 1e3).
func TicketNumber(s string) (int64, bool) {
	s = strings.TrimPrefix(s, "#")
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == s
}

// BadTicket is the Permanent error of a reference a target cannot read.
func BadTicket(kind, name, ref, forms string) *Error {
	return permanent("%s %q: %q is not a ticket of this target; it takes %s", kind, name, Printable(ref), forms)
}
