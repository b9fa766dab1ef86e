// Package mcpserver is the MCP front end: the create and status tools, their
// annotations derived from the target's capabilities, argument decoding with
// clear errors, and the HTTP handler with Origin checks.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// Server holds the dependencies of the tool handlers.
type Server struct {
	ledger  *ledger.Ledger
	metrics *metrics.Front
	log     *slog.Logger
}

// New builds an MCP server with one create tool per binding and find_request.
func New(cfg Config, l *ledger.Ledger, m *metrics.Front, log *slog.Logger) (*mcp.Server, error) {
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
		Logger:       log,
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
			"description": "Idempotency key chosen by you: a fresh UUID for each new ticket; the same value on every retry of it. Visible ASCII, no spaces.",
		},
		"title": map[string]any{
			"type": "string", "minLength": 1, "maxLength": ticket.MaxTitleLen,
			"description": "One-line summary of the ticket.",
		},
		"body": map[string]any{
			"type": "string", "maxLength": ticket.MaxBodyLen,
			"description": "Full description (plain text or Markdown).",
		},
		"priority": map[string]any{
			"type": "string", "enum": ticket.Priorities, "default": ticket.DefaultPriority,
			"description": "Urgency of the ticket.",
		},
		"labels": map[string]any{
			"type": "array", "maxItems": ticket.MaxLabels,
			"items":       map[string]any{"type": "string", "minLength": 1, "maxLength": ticket.MaxLabelLen},
			"description": "Tags for the ticket.",
		},
		"wait_for_delivery_seconds": map[string]any{
			"type": "integer", "minimum": 0, "maximum": MaxWaitForDelivery, "default": 0,
			"description": "Optional: after accepting the ticket, wait up to this many seconds for its delivery and answer with the status reached " +
				"(progress notifications report each change if you pass a progress token). Not part of the request: a retry may wait or not.",
		},
	},
}

var createOutputSchema = map[string]any{
	"type":     "object",
	"required": []string{"request_id", "ticket_id", "status", "replayed"},
	"properties": map[string]any{
		"request_id": map[string]any{"type": "string"},
		"ticket_id":  map[string]any{"type": "string"},
		"target":     map[string]any{"type": "string"},
		"status":     map[string]any{"type": "string"},
		"replayed":   map[string]any{"type": "boolean"},
		"created_at": map[string]any{"type": "string"},
	},
}

func findTool() *mcp.Tool {
	return &mcp.Tool{
		Name: FindRequestTool,
		Description: "Report what happened to a create request, by the request_id you passed to it: " +
			"unknown (never accepted: safe to create), queued, published, delivered (with the external id and URL), " +
			"retrying, failed, or uncertain (check the target before creating it again). Call it after any error, " +
			"timeout or dropped connection of a create tool, before retrying.",
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
					"type": "string", "minLength": 1, "maxLength": ticket.MaxRequestIDLen,
					"description": "The request_id given to the create tool.",
				},
			},
		},
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
		return r, a, err
	}
	return r, a, checkWait(a.WaitForDelivery)
}

func (s *Server) createHandler(b Binding) mcp.ToolHandler {
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
		res, err := s.ledger.Create(ctx, r)
		if err == nil {
			failpoint.Hit(failpoint.FrontAfterCommit) // committed, not yet answered
		}
		var conflict *ledger.ConflictError
		switch {
		case errors.As(err, &conflict):
			outcome = metrics.CallConflict
			s.metrics.Conflicts.WithLabelValues(b.Tool).Inc()
			return toolError("idempotency_key_conflict: " + conflict.Error()), nil
		case err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
			// The write was queued and completes without its caller: do not
			// claim that nothing was written.
			s.log.Warn("create abandoned by its caller", "tool", b.Tool, "request_id", r.RequestID, "err", err)
			return toolError(fmt.Sprintf("the call ended before the ticket was confirmed (%v); it may have been stored. "+
				"Call find_request with the same request_id, and retry only with the same request_id and arguments.", err)), nil
		case err != nil:
			s.log.Error("create failed", "tool", b.Tool, "request_id", r.RequestID, "err", err)
			return toolError(fmt.Sprintf("the ticket was not stored (%v); nothing was written. "+
				"Retry with the same request_id and arguments, or call find_request.", err)), nil
		case res.Replayed:
			outcome = metrics.CallReplayed
			s.metrics.Replays.WithLabelValues(b.Tool).Inc()
		default:
			outcome = metrics.CallCreated
		}
		if a.WaitForDelivery > 0 {
			return jsonResult(s.awaitDelivery(ctx, req, res, time.Duration(a.WaitForDelivery)*time.Second))
		}
		return jsonResult(res)
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
		return s.invalid(FindRequestTool, err), nil
	}
	if err := ticket.ValidateRequestID(a.RequestID); err != nil {
		outcome = metrics.CallInvalid
		return s.invalid(FindRequestTool, err), nil
	}
	st, err := s.ledger.Find(ctx, a.RequestID)
	if err != nil {
		s.log.Error("find failed", "request_id", a.RequestID, "err", err)
		return toolError(fmt.Sprintf("could not read the status (%v); try again", err)), nil
	}
	outcome = metrics.CallOK
	return jsonResult(st)
}

func (s *Server) invalid(tool string, err error) *mcp.CallToolResult {
	arg := "arguments"
	var ie *ticket.InvalidError
	if errors.As(err, &ie) {
		arg = ie.Argument
	}
	s.metrics.Rejected.WithLabelValues(tool, boundedArg(arg)).Inc()
	return toolError(err.Error() + "; nothing was written")
}

// boundedArg keeps the metric label to the known argument names.
func boundedArg(arg string) string {
	switch arg {
	case "request_id", "title", "body", "priority", "labels", "wait_for_delivery_seconds":
		return arg
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

// decodeArgs decodes a tool's JSON arguments strictly into the struct v
// points to: invalid UTF-8, unknown arguments (names match exactly), an
// argument given twice, wrong types and trailing data are errors that name
// the argument.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	if !utf8.Valid(raw) {
		return invalidUTF8(raw)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return translateDecodeError(err)
	}
	if dec.More() {
		return &ticket.InvalidError{Argument: "arguments", Reason: "have trailing data after the JSON object"}
	}
	return checkNames(raw, argNames(v))
}

// checkNames catches what encoding/json lets through: it matches names
// regardless of case ("Title" sets title) and keeps the last of two equal
// names, so a call could mean something other than what a reader of it sees.
func checkNames(raw json.RawMessage, names []string) error {
	var unknown error // the first name not declared, if it comes before a repeated one
	dup := duplicate(raw, func(name string, _ []byte) {
		if unknown != nil || slices.Contains(names, name) {
			return
		}
		reason := fmt.Sprintf("unknown argument %q", name)
		if i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, name) }); i >= 0 {
			reason += fmt.Sprintf(" (names are case-sensitive: %q)", names[i])
		}
		unknown = &ticket.InvalidError{Argument: "arguments", Reason: reason}
	})
	switch {
	case unknown != nil:
		return unknown
	case dup != "":
		return &ticket.InvalidError{Argument: dup, Reason: "is given more than once"}
	}
	return nil
}

var argNamesOf sync.Map // reflect.Type → []string

// argNames lists the JSON names of the fields of the struct v points to.
func argNames(v any) []string {
	t := reflect.TypeOf(v).Elem()
	if names, ok := argNamesOf.Load(t); ok {
		return names.([]string)
	}
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	argNamesOf.Store(t, names)
	return names
}

// invalidUTF8 names the argument whose value holds the bytes that are not
// UTF-8 (the first in name order), or the arguments as a whole when the bytes
// sit in a name or outside any value.
func invalidUTF8(raw json.RawMessage) error {
	var args map[string]json.RawMessage // values keep their bytes as sent
	if json.Unmarshal(raw, &args) == nil {
		for _, name := range slices.Sorted(maps.Keys(args)) {
			if !utf8.Valid(args[name]) && !strings.ContainsRune(name, utf8.RuneError) {
				return &ticket.InvalidError{Argument: name, Reason: "is not valid UTF-8"}
			}
		}
	}
	return &ticket.InvalidError{Argument: "arguments", Reason: "are not valid UTF-8"}
}

func translateDecodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return &ticket.InvalidError{Argument: "arguments", Reason: "must be a JSON object, got " + te.Value}
		}
		field, _, _ := strings.Cut(te.Field, ".")
		return &ticket.InvalidError{Argument: field, Reason: fmt.Sprintf("must be of type %s, got %s", jsonType(te.Type.Kind().String()), te.Value)}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &ticket.InvalidError{Argument: "arguments", Reason: "unknown argument " + name}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &ticket.InvalidError{Argument: "arguments", Reason: "are not valid JSON: " + se.Error()}
	}
	return &ticket.InvalidError{Argument: "arguments", Reason: err.Error()}
}

func jsonType(kind string) string {
	switch kind {
	case "slice":
		return "array"
	case "struct", "map":
		return "object"
	}
	return kind
}
