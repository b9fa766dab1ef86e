// Package trail is ticketrelay's audit trail: one append-only entry per
// tool call mcp-front answered (who, with which client, which tool and
// request, what came of it) and per operator action (redrive, resolve,
// forget-host), kept in the database's table trail for a bounded time and
// exported as JSON lines: by `dispatcher audit`, by a file a log shipper
// follows (FileSink), and in multi-host mode by a replicated JetStream
// stream every host ships its entries to (Shipper, ReadStream).
//
// An entry holds no token and no ticket body: the subject, the client's
// name and version, the tool, the scoped request id, the outcome, the
// ticket id and a one-word reason. Decision 0145 says why the front writes
// it asynchronously, beside the ledger rather than in its transaction.
//
// (Package audit is the JetStream stream's audit, an unrelated thing.)
package trail

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Kinds of entry.
const (
	KindCall     = "call"     // a tool call mcp-front answered or refused
	KindOperator = "operator" // an operator action
	KindTrail    = "trail"    // the trail's own note: entries it had to drop
)

// Outcomes of a tool call.
const (
	Accepted = "accepted" // a create stored a new ticket
	Replayed = "replayed" // a create answered an earlier call's ticket
	Conflict = "conflict" // a create reused a request_id with other arguments (or another subject's)
	Refused  = "refused"  // the caller may not make the call (grant, scope, rate limit)
	Invalid  = "invalid"  // the arguments failed validation; nothing was written
	Error    = "error"    // an internal or storage error, or an undecided outcome
	OK       = "ok"       // find_request answered
)

// Outcomes of an operator action (and Error, Refused).
const (
	Done = "done" // the action was carried out
	// Failed: the action was refused by the store (not found, wrong state).
	Failed = "failed"
)

// Dropped is the outcome of a KindTrail entry: Detail says how many
// entries the front could not record (its queue was full).
const Dropped = "dropped"

// Entry is one line of the trail.
type Entry struct {
	// Seq orders the entries of one database; set when stored, 0 before.
	Seq  int64     `json:"seq,omitempty"`
	Time time.Time `json:"time"`
	// Host is the dispatcher host that shipped the entry (multi-host reads
	// only); "" in a database's own trail.
	Host string `json:"host,omitempty"`
	Kind string `json:"kind"`
	// Subject is who acted: the caller's subject ("" for the caller
	// without a token), or the operator.
	Subject       string `json:"subject"`
	Client        string `json:"client,omitempty"`         // the MCP client's clientInfo name
	ClientVersion string `json:"client_version,omitempty"` // and version
	Tool          string `json:"tool,omitempty"`           // a call's tool
	Action        string `json:"action,omitempty"`         // an operator's action
	RequestID     string `json:"request_id,omitempty"`     // scoped (ticket.ScopedID)
	Outcome       string `json:"outcome"`
	TicketID      string `json:"ticket_id,omitempty"`
	// Reason says in a word or a few why a call was refused, invalid or an
	// error (the argument at fault, the refusal), or what an operator
	// action's arguments were beside the request id (a host, an external
	// id). Never a ticket's text.
	Reason string `json:"reason,omitempty"`
}

// Field bounds: what a caller controls (client name, tool name) is cut to
// them, so that one entry stays small.
const (
	maxField  = 128
	maxReason = 256
	maxID     = 512 // a scoped id: subject (≤ 64, or an issuer + sub) + ':' + request_id (≤ 255)
)

// Clean returns e with every field cut to its bound and made valid UTF-8,
// and its time in UTC.
func (e Entry) Clean() Entry {
	e.Time = e.Time.UTC()
	e.Subject = cut(e.Subject, maxID)
	e.Client = cut(e.Client, maxField)
	e.ClientVersion = cut(e.ClientVersion, maxField)
	e.Tool = cut(e.Tool, maxField)
	e.Action = cut(e.Action, maxField)
	e.RequestID = cut(e.RequestID, maxID)
	e.TicketID = cut(e.TicketID, maxField)
	e.Reason = cut(e.Reason, maxReason)
	return e
}

func cut(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// Validate checks what every entry needs.
func (e Entry) Validate() error {
	switch {
	case e.Time.IsZero():
		return errors.New("trail: entry without a time")
	case e.Outcome == "":
		return errors.New("trail: entry without an outcome")
	}
	switch e.Kind {
	case KindCall, KindTrail:
	case KindOperator:
		if e.Action == "" {
			return errors.New("trail: operator entry without an action")
		}
	default:
		return fmt.Errorf("trail: entry of unknown kind %q", e.Kind)
	}
	return nil
}

// Recorder records entries: the front's asynchronous Writer, or a Store
// directly (an operator command, the console).
type Recorder interface {
	Record(ctx context.Context, e Entry) error
}

// Filter selects entries; zero fields select everything.
type Filter struct {
	Since, Until time.Time // Since ≤ time < Until
	Subject      string
	Name         string // a tool or an action
	RequestID    string // scoped
	Outcome      string
	AfterSeq     int64 // only entries after this one (following)
	Limit        int   // at most this many, oldest first; 0: no limit
}

// Matches reports whether e passes f (the stream's entries are filtered
// here; the table's by the query).
func (f Filter) Matches(e Entry) bool {
	switch {
	case !f.Since.IsZero() && e.Time.Before(f.Since),
		!f.Until.IsZero() && !e.Time.Before(f.Until),
		f.Subject != "" && e.Subject != f.Subject,
		f.Name != "" && e.Tool != f.Name && e.Action != f.Name,
		f.RequestID != "" && e.RequestID != f.RequestID,
		f.Outcome != "" && e.Outcome != f.Outcome:
		return false
	}
	return true
}
