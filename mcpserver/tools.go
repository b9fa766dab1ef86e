// Package mcpserver is the MCP front end: the create and status tools, their
// annotations derived from the target's capabilities, argument decoding with
// clear errors, and the HTTP handler with Origin checks.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/clusterrec"
	"ticketrelay/downstream"
	"ticketrelay/internal/failpoint"
	"ticketrelay/ledger"
	"ticketrelay/metrics"
	"ticketrelay/ticket"
)

// FindRequestTool is the name of the status tool.
const FindRequestTool = "find_request"

// Binding ties a create tool to a target.
type Binding struct {
	Tool         string // tool name, e.g. "create_ticket"
	Description  string // what the tool is for (the retry advice is appended)
	Target       string
	Capabilities downstream.Capabilities
}

// Config configures the MCP server.
type Config struct {
	Name     string // implementation name; default "ticketrelay"
	Version  string
	Bindings []Binding
}

// Requests is the part of a store the tools use: accept a request exactly
// once, and report where one stands. The ledger is one (a single host); a
// multi-host installation's front (clusterrec.Front) is the other.
type Requests interface {
	Create(ctx context.Context, req ticket.Request) (ledger.Result, error)
	Find(ctx context.Context, subject, requestID string) (ledger.RequestStatus, error)
}

var _ Requests = (*ledger.Ledger)(nil)

// Server holds the dependencies of the tool handlers.
type Server struct {
	ledger  Requests
	metrics *metrics.Front
	log     *slog.Logger
}

// New builds an MCP server with one create tool per binding and find_request.
func New(cfg Config, l Requests, m *metrics.Front, log *slog.Logger) (*mcp.Server, error) {
	if len(cfg.Bindings) == 0 {
		return nil, errors.New("mcpserver: no tool bindings")
	}
	s := &Server{ledger: l, metrics: m, log: log}
	name := cfg.Name
	if name == "" {
		name = "ticketrelay"
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Title: "ticketrelay", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       sdkLogger(log),
		// Prompts and resources are declared, empty, because prompts/list and
		// resources/list are answered (with empty lists) anyway.
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{},
			Prompts: &mcp.PromptCapabilities{}, Resources: &mcp.ResourceCapabilities{}},
	})
	for _, b := range cfg.Bindings {
		srv.AddTool(createTool(b), s.createHandler(b))
	}
	srv.AddTool(findTool(), s.findHandler)
	return srv, nil
}

const instructions = `ticketrelay files tickets in external systems exactly once per request_id.
Make a fresh UUID for every new ticket and pass it as request_id. After an error, a timeout or a
dropped connection, call find_request with the same request_id before doing anything else, and if
you retry, retry with the same request_id and the same arguments.`

func boolPtr(b bool) *bool { return &b }

func createTool(b Binding) *mcp.Tool {
	desc := strings.TrimSpace(b.Description)
	if desc == "" {
		desc = "Open a ticket in " + b.Target + "."
	}
	ann := &mcp.ToolAnnotations{
		Title:           "Create a ticket in " + b.Target,
		ReadOnlyHint:    false,
		DestructiveHint: boolPtr(false), // explicit: a nil pointer means "destructive" to clients
		OpenWorldHint:   boolPtr(true),
	}
	if b.Capabilities.Idempotent() {
		ann.IdempotentHint = true
		desc += "\n\nExactly once per request_id: generate a fresh UUID for every NEW ticket and keep it. " +
			"After an error, a timeout or a dropped connection, call find_request with the same request_id, " +
			"and retry with the SAME request_id and the SAME arguments: a retry never creates a second ticket, " +
			"it returns the first result with replayed=true. Reusing a request_id with different arguments is an error."
	} else {
		desc += "\n\nGenerate a fresh UUID for every NEW ticket and pass it as request_id. " + b.Target +
			" cannot deduplicate, so do NOT retry this tool blindly: after any error, timeout or dropped connection, " +
			"first call find_request with the same request_id. Retry only if it says \"unknown\", and then with the " +
			"SAME request_id and the SAME arguments."
	}
	return &mcp.Tool{
		Name:         b.Tool,
		Description:  desc,
		Annotations:  ann,
		InputSchema:  createInputSchema,
		OutputSchema: createOutputSchema,
	}
}

var createInputSchema = map[string]any{
	"type":                 "object",
	"additionalProperties": false,
	"required":             []string{"request_id", "title"},
	"properties": map[string]any{
		"request_id": map[string]any{
			"type": "string", "minLength": 1, "maxLength": ticket.MaxRequestIDLen, "pattern": `^[!-~]+$`,
			"description": fmt.Sprintf("Idempotency key chosen by you: a fresh UUID for each new ticket; the same value on every retry of it. "+
				"1 to %d visible ASCII characters, no spaces.", ticket.MaxRequestIDLen),
		},
		"title": map[string]any{
			"type": "string", "minLength": 1, "maxLength": ticket.MaxTitleLen,
			"description": fmt.Sprintf("One-line summary of the ticket: at most %d characters, no line breaks.", ticket.MaxTitleLen),
		},
		"body": map[string]any{
			// maxLength counts characters; the server's limit is in bytes
			// (a character takes 1 to 4), so the description gives the rule.
			"type": "string", "maxLength": ticket.MaxBodyLen,
			"description": fmt.Sprintf("Full description (plain text or Markdown). At most %d bytes (UTF-8): "+
				"fewer characters when it holds non-ASCII text.", ticket.MaxBodyLen),
		},
		"priority": map[string]any{
			"type": "string", "enum": ticket.Priorities, "default": ticket.DefaultPriority,
			"description": "Urgency of the ticket.",
		},
		"labels": map[string]any{
			"type": "array", "maxItems": ticket.MaxLabels,
			"items":       map[string]any{"type": "string", "minLength": 1, "maxLength": ticket.MaxLabelLen},
			"description": fmt.Sprintf("Tags for the ticket: at most %d, each at most %d characters.", ticket.MaxLabels, ticket.MaxLabelLen),
		},
		"wait_for_delivery_seconds": map[string]any{
			"type": "integer", "minimum": 0, "maximum": MaxWaitForDelivery, "default": 0,
			"description": "Optional: after accepting the ticket, wait up to this many seconds for its delivery and answer with the status reached " +
				"(progress notifications report each change if you pass a progress token). Not part of the request: a retry may wait or not. " +
				"Keep it below your client's own time limit for a tool call: a call cut by the client was still accepted (find_request tells).",
		},
	},
}

// statuses lists every Status, in the order of DESIGN.md "Request status".
var statuses = []string{string(ledger.StatusUnknown), string(ledger.StatusQueued), string(ledger.StatusPublished),
	string(ledger.StatusDelivered), string(ledger.StatusRetrying), string(ledger.StatusFailed), string(ledger.StatusUncertain)}

func schemaString(desc string) map[string]any {
	return map[string]any{"type": "string", "description": desc}
}

func schemaTime(desc string) map[string]any {
	return map[string]any{"type": "string", "format": "date-time", "description": desc}
}

// Fields shared by the create tools' answer and find_request's.
var (
	requestIDOut   = schemaString("The request_id of the call, as given.")
	ticketIDOut    = schemaString("ticketrelay's id of the ticket, derived from request_id: the same on every repeat of the call.")
	targetOut      = schemaString("The target the ticket is delivered to.")
	externalIDOut  = schemaString("The target's id of the item it created, once delivered.")
	externalURLOut = schemaString("A link to the item the target created, once delivered (if the target gives one).")
	detailOut      = schemaString("What the status means and what to do next.")
)

var createOutputSchema = map[string]any{
	"type":     "object",
	"required": []string{"request_id", "ticket_id", "status", "replayed"},
	"properties": map[string]any{
		"request_id": requestIDOut,
		"ticket_id":  ticketIDOut,
		"target":     targetOut,
		"status": map[string]any{"type": "string", "enum": statuses,
			"description": "Where the request stands: queued when first accepted. A repeated call (replayed) and a call that waited " +
				"for delivery report the current status, as find_request does."},
		"replayed": map[string]any{"type": "boolean",
			"description": "true if an earlier call with the same request_id and arguments had already accepted the ticket: this call created nothing."},
		"created_at":   schemaTime("When the ticket was accepted (by the first call)."),
		"external_id":  externalIDOut,
		"external_url": externalURLOut,
		"detail":       detailOut,
	},
}

func schemaCount(desc string) map[string]any {
	return map[string]any{"type": "integer", "minimum": 0, "description": desc}
}

// findOutputSchema describes ledger.RequestStatus.
var findOutputSchema = map[string]any{
	"type":     "object",
	"required": []string{"request_id", "status", "detail"},
	"properties": map[string]any{
		"request_id": requestIDOut,
		"status": map[string]any{"type": "string", "enum": statuses,
			"description": "Where the request stands: unknown (nothing stored under this request_id), queued, published, " +
				"delivered, retrying, failed or uncertain. detail says what it means and what to do."},
		"ticket_id":       ticketIDOut,
		"tool":            schemaString("The create tool that accepted the request."),
		"target":          targetOut,
		"accepted_at":     schemaTime("When the request was accepted and stored."),
		"published_at":    schemaTime("When the request was handed to the delivery queue (JetStream)."),
		"attempts":        schemaCount("Delivery calls made to the target so far."),
		"throttled":       schemaCount("Of the attempts, how many the target's rate limit refused; they do not count toward the attempt limit."),
		"in_progress":     map[string]any{"type": "boolean", "description": "true while a delivery call to the target is running."},
		"next_attempt_at": schemaTime("When the next delivery attempt (or the lookup of an earlier one) is due."),
		"last_error":      schemaString("The error of the last attempt, as recorded."),
		"external_id":     externalIDOut,
		"external_url":    externalURLOut,
		"updated_at":      schemaTime("When the delivery record last changed."),
		"detail":          detailOut,
	},
}

func findTool() *mcp.Tool {
	return &mcp.Tool{
		Name: FindRequestTool,
		Description: "Report what happened to a create request, by the request_id you passed to it: " +
			"unknown (nothing is stored under this request_id: never accepted, still being stored by a call in progress, " +
			"or forgotten after its retention; calling the same create tool again with the SAME request_id and arguments " +
			"is always safe, so do not use a new request_id), queued, published, delivered (with the external id and URL), " +
			"retrying, failed, or uncertain (its detail says what to check and do). Call it after any error, " +
			"timeout or dropped connection of a create tool, before retrying. It only reads.",
		Annotations: &mcp.ToolAnnotations{
			Title:        "Find a ticket request",
			ReadOnlyHint: true,
			// Meaningless beside readOnlyHint by the specification, but go-sdk
			// sends false explicitly, and a client that reads only this hint
			// would not repeat a status read after a reconnect.
			IdempotentHint: true,
			OpenWorldHint:  boolPtr(false),
		},
		InputSchema: map[string]any{
			"type":                 "object",
			"additionalProperties": false,
			"required":             []string{"request_id"},
			"properties": map[string]any{
				"request_id": map[string]any{
					"type": "string", "minLength": 1, "maxLength": ticket.MaxRequestIDLen, "pattern": `^[!-~]+$`,
					"description": "The request_id given to the create tool.",
				},
			},
		},
		OutputSchema: findOutputSchema,
	}
}

type createArgs struct {
	RequestID string   `json:"request_id"`
	Title     string   `json:"title"`
	Body      string   `json:"body"`
	Priority  string   `json:"priority"`
	Labels    []string `json:"labels"`
	// WaitForDelivery is not part of the request's identity (not in
	// ticket.Request, so not in its hash): a retry that waits still replays.
	WaitForDelivery int `json:"wait_for_delivery_seconds"`
}

type findArgs struct {
	RequestID string `json:"request_id"`
}

// decodeCreate decodes and validates the arguments of b's create tool into
// the normalized request (and the arguments that are not part of it).
func decodeCreate(b Binding, raw json.RawMessage) (ticket.Request, createArgs, error) {
	var a createArgs
	if err := decodeArgs(raw, &a); err != nil {
		return ticket.Request{}, a, err
	}
	r := ticket.Request{RequestID: a.RequestID, Tool: b.Tool, Target: b.Target,
		Title: a.Title, Body: a.Body, Priority: a.Priority, Labels: a.Labels}
	if err := r.Normalize(); err != nil {
		return r, a, labelItem(a.Labels, err)
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
	ledger.Result
	ExternalID  string `json:"external_id,omitempty"`
	ExternalURL string `json:"external_url,omitempty"`
	Detail      string `json:"detail,omitempty"`
}

// acceptedDetail is the detail of a first call's answer.
func acceptedDetail(target string) string {
	return "Accepted and stored; delivery to " + target + " is asynchronous: find_request (or wait_for_delivery_seconds) " +
		"reports when it is delivered and its id/URL. Do not create it again."
}

// now sets what st, the request's status as find_request gives it, says
// of it now: the status, where it was delivered, what it means.
func (c *createResult) now(st ledger.RequestStatus) {
	c.Status, c.ExternalID, c.ExternalURL, c.Detail = st.Status, st.ExternalID, st.ExternalURL, Advise(st)
}

// current is the answer to a replayed call: the first call's result with
// the status the ledger read in the same statement that found it
// (Result.Live).
func (s *Server) current(res ledger.Result) createResult {
	out := createResult{Result: res}
	if res.Live != nil {
		out.now(*res.Live)
	}
	return out
}

func (s *Server) createHandler(b Binding) mcp.ToolHandler {
	accepted := acceptedDetail(b.Target)
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		outcome := metrics.CallError
		defer func() {
			s.metrics.ToolCalls.WithLabelValues(b.Tool, outcome).Inc()
			s.metrics.CallDuration.WithLabelValues(b.Tool).Observe(time.Since(start).Seconds())
		}()
		r, a, err := decodeCreate(b, req.Params.Arguments)
		if err != nil {
			outcome = metrics.CallInvalid
			return s.invalid(b.Tool, err), nil
		}
		r.Subject = callerSubject(req)
		res, err := s.ledger.Create(ctx, r)
		if err == nil {
			failpoint.Hit(failpoint.FrontAfterCommit) // committed, not yet answered
		}
		var conflict *ledger.ConflictError
		switch {
		case errors.As(err, &conflict):
			outcome = metrics.CallConflict
			s.metrics.Conflicts.WithLabelValues(b.Tool).Inc()
			return toolError(conflictAdvice(conflict)), nil
		case errors.Is(err, ledger.ErrOtherSubject):
			outcome = metrics.CallConflict
			s.metrics.Conflicts.WithLabelValues(b.Tool).Inc()
			return toolError(otherSubjectAdvice), nil
		case errors.Is(err, clusterrec.ErrInProgress):
			// Multi-host: another host claimed it and is still committing.
			return toolError("idempotency_key_in_progress: another host is still accepting this request_id. " +
				"Repeat this call with the same request_id and arguments in a few seconds: it will return that result."), nil
		case errors.Is(err, clusterrec.ErrFull):
			s.log.Error("create refused: the cluster record is full", "tool", b.Tool, "err", err)
			return toolError("the ticket was not accepted: ticketrelay's cluster record is full (an operator must act); " +
				"nothing was written. Tell the user; retrying will not help until it is fixed."), nil
		case errors.Is(err, clusterrec.ErrOrphaned):
			s.log.Warn("create refused: this host's dispatcher is not running", "tool", b.Tool, "request_id", r.RequestID)
			return toolError("the ticket was not accepted: this ticketrelay host cannot deliver right now (its dispatcher is not " +
				"running). Retry with the SAME request_id and arguments: another host will take it; it never makes a second ticket."), nil
		case errors.Is(err, clusterrec.ErrUnavailable) && ctx.Err() == nil:
			// No quorum or an election that outlasted the call: the claim was
			// not decided, and a retry with the same request_id is safe.
			s.log.Warn("create refused: the cluster record is unavailable", "tool", b.Tool, "request_id", r.RequestID, "err", err)
			return toolError("the ticket was not accepted: the cluster that decides acceptance is unavailable (no quorum, or a " +
				"leader election in progress). Retry in a few seconds with the SAME request_id and arguments; it never makes a " +
				"second ticket."), nil
		case err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
			// The write was queued and completes without its caller: do not
			// claim that nothing was written.
			s.log.Warn("create abandoned by its caller", "tool", b.Tool, "request_id", r.RequestID, "err", err)
			return toolError(fmt.Sprintf("the call ended before the ticket was confirmed (%v); it may have been stored. "+
				"Call find_request with the same request_id, and retry only with the same request_id and arguments.", err)), nil
		case err != nil:
			// The ledger could not confirm the write (busy, closing): it may
			// or may not have committed.
			s.log.Error("create failed", "tool", b.Tool, "request_id", r.RequestID, "err", err)
			return toolError(fmt.Sprintf("the ticket may not have been stored (%v). Call find_request with the same request_id: "+
				"it tells whether it was. Repeating this call with the same request_id and arguments is safe too (it never makes "+
				"a second ticket); do not use a new request_id.", err)), nil
		case res.Replayed:
			outcome = metrics.CallReplayed
			s.metrics.Replays.WithLabelValues(b.Tool).Inc()
		default:
			outcome = metrics.CallCreated
		}
		if a.WaitForDelivery > 0 {
			return jsonResult(s.awaitDelivery(ctx, req, r.Subject, res, time.Duration(a.WaitForDelivery)*time.Second))
		}
		if res.Replayed {
			return jsonResult(s.current(res))
		}
		return jsonResult(createResult{Result: res, Detail: accepted})
	}
}

func (s *Server) findHandler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	start := time.Now()
	outcome := metrics.CallError
	defer func() {
		s.metrics.ToolCalls.WithLabelValues(FindRequestTool, outcome).Inc()
		s.metrics.CallDuration.WithLabelValues(FindRequestTool).Observe(time.Since(start).Seconds())
	}()
	var a findArgs
	if err := decodeArgs(req.Params.Arguments, &a); err != nil {
		outcome = metrics.CallInvalid
		return s.findInvalid(err), nil
	}
	if err := validateFindID(a.RequestID); err != nil {
		outcome = metrics.CallInvalid
		return s.findInvalid(err), nil
	}
	st, err := s.ledger.Find(ctx, callerSubject(req), a.RequestID)
	if err != nil {
		s.log.Error("find failed", "request_id", a.RequestID, "err", err)
		return toolError(fmt.Sprintf("could not read the status (%v); try again", err)), nil
	}
	outcome = metrics.CallOK
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

// invalid answers a create call that failed validation: nothing was
// written, which is certain, since validation comes before the ledger.
func (s *Server) invalid(tool string, err error) *mcp.CallToolResult {
	s.reject(tool, err)
	return toolError(err.Error() + "; nothing was written")
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
func (s *Server) findInvalid(err error) *mcp.CallToolResult {
	arg := s.reject(FindRequestTool, err)
	msg := err.Error()
	if arg == "request_id" {
		msg = "the request_id is malformed: " + msg + "; " + requestIDFormat + "."
	}
	return toolError(msg)
}

// reject counts an invalid call and returns the argument at fault.
func (s *Server) reject(tool string, err error) string {
	arg := "arguments"
	var ie *ticket.InvalidError
	if errors.As(err, &ie) {
		arg = ie.Argument
	}
	s.metrics.Rejected.WithLabelValues(tool, boundedArg(arg)).Inc()
	return arg
}

// boundedArg keeps the metric label to the known argument names; an item
// of the labels (labels[3]) counts as labels.
func boundedArg(arg string) string {
	switch arg {
	case "request_id", "title", "body", "priority", "labels", "wait_for_delivery_seconds":
		return arg
	}
	if strings.HasPrefix(arg, "labels[") {
		return "labels"
	}
	return "arguments"
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func jsonResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: encode result: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
	}, nil
}
