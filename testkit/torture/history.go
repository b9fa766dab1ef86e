package torture

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Event kinds of the history.
const (
	KindRequest = "request" // the harness made up a new request
	KindCall    = "call"    // one create_ticket-style call and what the caller saw
	KindFind    = "find"    // one find_request call
	KindKill    = "kill"    // a process died (killed by the scheduler, a failpoint, or on its own)
	KindStream  = "stream"  // the scheduler deleted or purged the stream (Detail), or failed to (Err)
	KindPhase   = "phase"   // the run moved on (faults stopped, callers done, settled)
)

// Outcomes of a call as the caller saw it.
const (
	OutAccepted    = "accepted"    // a result: the request is stored (Replayed says whether it was the first)
	OutAmbiguous   = "ambiguous"   // no answer (cut, timeout, crash) or "it may have been stored"
	OutNotStored   = "not-stored"  // the server said nothing was written
	OutConflict    = "conflict"    // idempotency_key_conflict: never expected, the harness repeats its arguments
	OutInvalid     = "invalid"     // the arguments were refused: never expected
	OutUnavailable = "unavailable" // no session could be opened: nothing was sent
	OutKnown       = "known"       // find_request knows the request
	OutUnknown     = "unknown"     // find_request says it was never accepted
)

// Call modes.
const (
	ModeNormal  = "normal"
	ModeCut     = "cut"     // the TCP connection is reset a few ms after the call is written
	ModeTimeout = "timeout" // the caller gives up after a few ms
	ModeHedge   = "hedge"   // a second call with the same id, concurrently, on another session
	ModeReplay  = "replay"  // the same request again after it was accepted
)

// Kill causes.
const (
	CauseScheduler = "scheduler" // SIGKILL sent by the fault scheduler
	CauseDisarm    = "disarm"    // SIGKILL sent at the end of the faults to drop armed failpoints
	CauseFailpoint = "failpoint" // the process killed itself at an armed failpoint
	CauseCrash     = "crash"     // the process exited on its own: never expected
)

// Request is one request the harness sent (maybe never accepted).
type Request struct {
	ID       string   `json:"request_id"`
	Tool     string   `json:"tool"`
	Target   string   `json:"target"`
	Kind     string   `json:"kind"`  // the target's kind: webhook, zendesk, …
	Keyed    bool     `json:"keyed"` // the target takes a dedupe key (a comment: or its marker lookup is consistent)
	Title    string   `json:"title"`
	Body     string   `json:"body,omitempty"`
	Priority string   `json:"priority,omitempty"`
	Labels   []string `json:"labels,omitempty"`
	// Fingerprint groups a create with the others of its fingerprint
	// (fingerprint.go); "" for none.
	Fingerprint string `json:"fingerprint,omitempty"`
	// A comment or an update (beyond.go): Action says which; On is the
	// ticket argument (the create's ticket_id or request_id, or the
	// downstream's own reference); OnRequest the create's request id (""
	// for a ticket ticketrelay did not file); Set an update's fields.
	Action    string  `json:"action,omitempty"`
	On        string  `json:"on,omitempty"`
	OnRequest string  `json:"on_request,omitempty"`
	Set       *Fields `json:"set,omitempty"`
}

// args are the tool arguments of r.
func (r Request) args() map[string]any {
	if r.Action != "" {
		return r.actionArgs()
	}
	a := map[string]any{"request_id": r.ID, "title": r.Title, "body": r.Body, "priority": r.Priority}
	if len(r.Labels) > 0 {
		a["labels"] = r.Labels
	}
	if r.Fingerprint != "" {
		a["fingerprint"] = r.Fingerprint
	}
	return a
}

// Event is one line of the history.
type Event struct {
	At        time.Time `json:"at"`
	Kind      string    `json:"kind"`
	Caller    int       `json:"caller,omitempty"`
	Request   *Request  `json:"request,omitempty"` // KindRequest
	RequestID string    `json:"request_id,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	Mode      string    `json:"mode,omitempty"`
	Outcome   string    `json:"outcome,omitempty"`
	Replayed  bool      `json:"replayed,omitempty"`
	Grouped   bool      `json:"grouped,omitempty"` // a fingerprinted create answered as an occurrence
	TicketID  string    `json:"ticket_id,omitempty"`
	Status    string    `json:"status,omitempty"` // find_request's answer
	Component string    `json:"component,omitempty"`
	Cause     string    `json:"cause,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	Err       string    `json:"err,omitempty"`
}

// history records events in memory and, as JSON lines, to w.
type history struct {
	mu     sync.Mutex
	w      io.Writer
	now    func() time.Time
	events []Event
	werr   error
}

func newHistory(w io.Writer, now func() time.Time) *history {
	return &history{w: w, now: now}
}

func (h *history) add(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.At.IsZero() {
		e.At = h.now()
	}
	h.events = append(h.events, e)
	if h.w == nil || h.werr != nil {
		return
	}
	b, err := json.Marshal(e)
	if err == nil {
		_, err = h.w.Write(append(b, '\n'))
	}
	if err != nil {
		h.werr = fmt.Errorf("torture: write history: %w", err)
	}
}

// snapshot returns a copy of the events so far.
func (h *history) snapshot() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

func (h *history) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.werr
}
