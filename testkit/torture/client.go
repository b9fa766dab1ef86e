package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/ticket"
)

// callTimeout bounds a call that is not meant to time out.
const callTimeout = 15 * time.Second

// load is what the callers share.
type load struct {
	url      func() string
	h        *history
	prefix   string          // of request ids: "trq-<seed>"
	faults   context.Context // done when the faults stop
	deadline time.Time       // callers give up retrying after it
	requests int             // per caller; 0: until faults stop
	pace     time.Duration   // mean pause between two requests of a caller
	// actions: callers also comment on and update their tickets
	// (beyond.go), and comment on slackThread.
	actions     bool
	slackThread string
	// fingerprints: some creates carry a fingerprint (fingerprint.go).
	fingerprints bool
}

// caller is one MCP client making requests one after another, each until
// an answer: Claude Code's behaviour (one repeat on a new connection) and
// more (any number of repeats, hedged duplicates, replays after success).
type caller struct {
	id    int
	rng   *rand.Rand
	l     *load
	filed []filed // the caller's creates seen accepted, oldest first
	pool  []fingerprint
}

func (c *caller) faulty() bool { return c.l.faults.Err() == nil }

func (c *caller) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (c *caller) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)+1))
}

// run makes the caller's requests.
func (c *caller) run(ctx context.Context) {
	for n := 1; ; n++ {
		if c.l.requests > 0 && n > c.l.requests || c.l.requests == 0 && !c.faulty() || time.Now().After(c.l.deadline) {
			return
		}
		r, ok := Request{}, false
		if c.l.actions && len(c.filed) > 0 && c.rng.Float64() < actionShare {
			r, ok = c.newAction(n)
		}
		if !ok {
			r = c.fingerprinted(c.newRequest(n, Kinds[c.rng.IntN(len(Kinds))]))
		}
		c.l.h.add(Event{Kind: KindRequest, Caller: c.id, Request: &r, RequestID: r.ID})
		// A report that joined another's ticket filed none of its own.
		if ok, grouped := c.request(ctx, r); ok && !grouped && r.Action == "" {
			c.filed = append(c.filed, filed{id: r.ID, kind: r.Kind, fp: r.Fingerprint != ""})
		}
		if !c.sleep(ctx, c.between(0, 2*c.l.pace)) {
			return
		}
	}
}

var words = []string{"disk", "full", "on", "node", "login", "fails", "after", "deploy", "latency", "spike", "in", "checkout", "queue", "stuck"}

func (c *caller) newRequest(n int, kind string) Request {
	id := fmt.Sprintf("%s-c%02d-r%04d", c.l.prefix, c.id, n)
	var title []string
	for range 2 + c.rng.IntN(4) {
		title = append(title, words[c.rng.IntN(len(words))])
	}
	r := Request{
		ID: id, Tool: ToolFor(kind), Target: kind, Kind: kind, Keyed: keyed(kind),
		Title:    "torture " + id + ": " + strings.Join(title, " "),
		Body:     fmt.Sprintf("Filed by torture caller %d, request %d.\nNothing to do.", c.id, n),
		Priority: ticket.Priorities[c.rng.IntN(len(ticket.Priorities))],
	}
	if c.rng.IntN(2) == 0 {
		r.Labels = []string{"torture", fmt.Sprintf("caller-%d", c.id)}
	}
	return r
}

// request sends r until a caller sees it accepted, or gives up at the
// deadline. A tool without a dedupe key is retried only after find_request
// says the request is unknown (the agent protocol its description gives).
// It reports whether the caller saw r accepted (find_request knowing it
// counts), and whether it may have been grouped onto another's ticket (a
// fingerprinted create answered grouped, or known only to find_request).
func (c *caller) request(ctx context.Context, r Request) (accepted, grouped bool) {
	for attempt := 1; time.Now().Before(c.l.deadline); attempt++ {
		mode := c.pickMode(r, attempt)
		var out Event
		if mode == ModeHedge {
			out = c.hedge(ctx, r, attempt)
		} else {
			out = c.create(ctx, r, attempt, mode)
		}
		switch out.Outcome {
		case OutAccepted:
			if c.rng.IntN(7) == 0 {
				c.sleep(ctx, c.between(0, 300*time.Millisecond))
				c.create(ctx, r, attempt+1, ModeReplay)
			}
			return true, out.Grouped
		case OutConflict, OutInvalid:
			return false, false // recorded; the checker reports it
		case OutUnavailable:
			if !c.sleep(ctx, c.between(50*time.Millisecond, 300*time.Millisecond)) {
				return false, false
			}
			continue
		}
		// Ambiguous, or not stored.
		if !r.retriesBlindly() {
			st := c.find(ctx, r)
			if st == "" {
				return false, false // deadline
			}
			if st != OutUnknown {
				return true, r.Fingerprint != "" // the request is known: never send it again
			}
		}
		if !c.sleep(ctx, c.between(10*time.Millisecond, 250*time.Millisecond)) {
			return false, false
		}
	}
	return false, false
}

// pickMode chooses how a call misbehaves while the faults run. Hedged
// duplicates are sent only to tools with idempotentHint, as a client would.
func (c *caller) pickMode(r Request, attempt int) string {
	if !c.faulty() {
		return ModeNormal
	}
	p := c.rng.Float64()
	cut, timeout := 0.2, 0.2
	if attempt > 1 {
		cut, timeout = 0.1, 0.1
	}
	switch {
	case p < cut:
		return ModeCut
	case p < cut+timeout:
		return ModeTimeout
	case p < cut+timeout+0.08 && r.retriesBlindly():
		return ModeHedge
	}
	return ModeNormal
}

// session opens a new MCP session on a new connection.
func (c *caller) session(ctx context.Context, cut time.Duration) (*mcp.ClientSession, func(), error) {
	return openSession(ctx, c.l.url(), cut)
}

// openSession opens an MCP session to url on a connection of its own; with
// cut >= 0 the connection is reset cut after a tools/call is written on it.
func openSession(ctx context.Context, url string, cut time.Duration) (*mcp.ClientSession, func(), error) {
	hc, tr := newHTTPClient(cut)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "torture-caller", Version: "1"}, nil).Connect(cctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	return cs, func() { cs.Close(); tr.CloseIdleConnections() }, nil
}

// create makes one call of r's tool and records what the caller saw.
func (c *caller) create(ctx context.Context, r Request, attempt int, mode string) Event {
	e := Event{Kind: KindCall, Caller: c.id, RequestID: r.ID, Attempt: attempt, Mode: mode}
	defer func() { c.l.h.add(e) }()
	cut, timeout := time.Duration(-1), callTimeout
	switch mode {
	case ModeCut:
		cut = c.between(0, 10*time.Millisecond) // a create answers within a few ms
		e.Detail = "cut after " + cut.String()
	case ModeTimeout:
		timeout = c.between(time.Millisecond, 12*time.Millisecond)
		e.Detail = "timeout " + timeout.String()
	}
	cs, done, err := c.session(ctx, cut)
	if err != nil {
		e.Outcome, e.Err = OutUnavailable, err.Error()
		return e
	}
	defer done()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: r.Tool, Arguments: r.args()})
	cancel()
	if err != nil {
		e.Outcome, e.Err = OutAmbiguous, err.Error()
		return e
	}
	classify(&e, res)
	return e
}

// hedge sends r twice at once on two sessions: both answers are recorded
// and the first accepted one is returned.
func (c *caller) hedge(ctx context.Context, r Request, attempt int) Event {
	var wg sync.WaitGroup
	outs := make([]Event, 2)
	for i := range outs {
		wg.Go(func() { outs[i] = c.create(ctx, r, attempt, ModeHedge) })
	}
	wg.Wait()
	if outs[1].Outcome == OutAccepted {
		return outs[1]
	}
	return outs[0]
}

// classify reads a tool result into e.
func classify(e *Event, res *mcp.CallToolResult) {
	text := resultText(res)
	if !res.IsError {
		var v struct {
			RequestID string `json:"request_id"`
			TicketID  string `json:"ticket_id"`
			Replayed  bool   `json:"replayed"`
			Grouped   bool   `json:"grouped"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		// A comment on a ticket ticketrelay did not file has no ticket id;
		// answers-agree checks every create's.
		if err := json.Unmarshal(b, &v); err != nil || v.RequestID == "" && v.TicketID == "" {
			e.Outcome, e.Err = OutAmbiguous, "unreadable result: "+text
			return
		}
		e.Outcome, e.TicketID, e.Replayed, e.Grouped = OutAccepted, v.TicketID, v.Replayed, v.Grouped
		return
	}
	e.Err = text
	switch {
	case strings.Contains(text, "idempotency_key_conflict"):
		e.Outcome = OutConflict
	case strings.HasPrefix(text, "invalid argument"):
		e.Outcome = OutInvalid
	case strings.Contains(text, "was not stored"):
		e.Outcome = OutNotStored
	default: // "may have been stored", or anything else
		e.Outcome = OutAmbiguous
	}
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// find asks find_request about r until it answers; it returns OutUnknown,
// OutKnown, or "" at the deadline.
func (c *caller) find(ctx context.Context, r Request) string {
	for time.Now().Before(c.l.deadline) {
		st, err := findStatus(ctx, c.session, r.ID)
		e := Event{Kind: KindFind, Caller: c.id, RequestID: r.ID, Status: st}
		switch {
		case err != nil:
			e.Outcome, e.Err = OutUnavailable, err.Error()
		case st == "unknown":
			e.Outcome = OutUnknown
		default:
			e.Outcome = OutKnown
		}
		c.l.h.add(e)
		if err == nil {
			return e.Outcome
		}
		if !c.sleep(ctx, c.between(50*time.Millisecond, 300*time.Millisecond)) {
			return ""
		}
	}
	return ""
}

type sessionFunc func(ctx context.Context, cut time.Duration) (*mcp.ClientSession, func(), error)

// findStatus calls find_request once on a new session.
func findStatus(ctx context.Context, open sessionFunc, id string) (string, error) {
	cs, done, err := open(ctx, -1)
	if err != nil {
		return "", err
	}
	defer done()
	return findOn(ctx, cs, id)
}

func findOn(ctx context.Context, cs *mcp.ClientSession, id string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "find_request", Arguments: map[string]any{"request_id": id}})
	if err != nil {
		return "", err
	}
	if res.IsError {
		return "", fmt.Errorf("find_request: %s", resultText(res))
	}
	var v struct {
		Status string `json:"status"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &v); err != nil || v.Status == "" {
		return "", fmt.Errorf("find_request: unreadable result %q", resultText(res))
	}
	return v.Status, nil
}
