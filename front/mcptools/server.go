// Package mcptools holds the MCP tools of mcp-front: one create tool per
// configured binding and find_request, their schemas and annotations, the
// decoding and checking of their arguments, the words they answer the agent
// with, the wait for delivery, and the middleware that counts their calls.
// It knows no transport: mcphttp and mcpstdio serve the *mcp.Server New
// returns.
package mcptools

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/loggate"
	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/store/trail"
	"ticketrelay/ticket"
)

// FindRequestTool is the name of the status tool.
const FindRequestTool = "find_request"

// Binding ties a create tool to a target.
type Binding struct {
	Tool         string // tool name, e.g. "create_ticket"
	Description  string // what the tool is for (the retry advice is appended)
	Target       string
	Kind         string // the target's kind ("local", "zendesk", …), for the tool's title; "" if unknown
	Capabilities downstream.Capabilities
	// Fields are the target's fields the tool sets, from its arguments or
	// fixed (fields.go).
	Fields []ticket.FieldMap
}

// Config configures the MCP server.
type Config struct {
	Name     string // implementation name; default "ticketrelay"
	Version  string
	Bindings []Binding
	// Access holds each caller to its grants; nil: every caller may call
	// every tool.
	Access *Access
	// Trail, if set, records every tool call in the audit trail.
	Trail trail.Recorder
	Now   func() time.Time // the trail's clock; default time.Now
	// Beyond says, per target name, what it takes beyond creates: where
	// one takes comments or updates, add_comment or update_ticket is
	// served (beyond.go).
	Beyond map[string]Beyond
	// Search, if set, serves search_tickets. A caller held to grants
	// finds its own tickets and those of the targets it may file to; with
	// SearchOwn, every caller finds its own only (decision 0190).
	Search    Searcher
	SearchOwn bool
	// GroupWindows is, per target, how long a fingerprint's ticket takes
	// occurrences (default request.DefaultGroupWindow).
	GroupWindows map[string]time.Duration
}

// Requests is the part of a store the tools use: accept a request exactly
// once, and report where one stands. The ledger is one (a single host); a
// multi-host installation's front (clusterrec.Front) is the other.
type Requests interface {
	Create(ctx context.Context, req ticket.Request) (request.Result, error)
	Find(ctx context.Context, subject, requestID string) (request.Report, error)
}

// Server holds the dependencies of the tool handlers.
type Server struct {
	ledger Requests
	log    *slog.Logger
	// add_comment's and update_ticket's (beyond.go).
	beyond    map[string]Beyond
	access    *Access
	toolsOf   map[string][]string // target → its create tools
	search    Searcher
	bindings  []Binding
	searchOwn bool
	// groupWindows: Config.GroupWindows (fingerprint.go).
	groupWindows map[string]time.Duration
}

// New builds an MCP server with one create tool per binding and find_request;
// m counts their calls (see measure).
func New(cfg Config, l Requests, m *metrics.Front, log *slog.Logger) (*mcp.Server, error) {
	if len(cfg.Bindings) == 0 {
		return nil, errors.New("mcptools: no tool bindings")
	}
	s := &Server{ledger: l, log: log, search: cfg.Search, access: cfg.Access, bindings: cfg.Bindings, searchOwn: cfg.SearchOwn,
		groupWindows: cfg.GroupWindows}
	name := cfg.Name
	if name == "" {
		name = "ticketrelay"
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Title: "ticketrelay", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       loggate.SDKLogger(log),
		Capabilities: capabilities(),
	})
	known := []string{FindRequestTool}
	if cfg.Search != nil {
		known = append(known, SearchTicketsTool)
	}
	var creates []string
	for _, b := range cfg.Bindings {
		known = append(known, b.Tool)
		creates = append(creates, b.Tool)
	}
	cfg.Access = cfg.Access.withCreates(creates)
	known = append(known, beyondTools(cfg)...)
	if cfg.Access != nil {
		for _, t := range known {
			m.ToolRefused.WithLabelValues(t) // exported at 0 from the start
		}
	}
	// traced is outermost: every tools/call has its span, refused or not.
	// byProtocol is next: a method it refuses is no tool call to
	// count, and it shapes the list byGrant filtered. A call byGrant
	// refuses reaches no handler, so measure does not count it either;
	// record, outside byGrant, records it.
	srv.AddReceivingMiddleware(traced(), byProtocol(), record(cfg.Trail, cfg.Now), cfg.Access.byGrant(known, m), measure(m))
	for _, b := range cfg.Bindings {
		srv.AddTool(createTool(b), s.createHandler(b))
	}
	srv.AddTool(findTool(), s.findHandler)
	s.addBeyond(srv, cfg)
	if cfg.Search != nil {
		srv.AddTool(searchTool(cfg.SearchOwn), s.searchHandler)
	}
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
		Title:           toolTitle(b),
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
		InputSchema:  inputSchema(b),
		OutputSchema: createOutputSchema,
	}
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

// kindTitles says what a create tool does for each kind of target, in the
// words of the system it files into, for the title a client lists it under.
var kindTitles = map[string]string{
	"local":     "Create a ticket in the local ticket file",
	"webhook":   "Create a ticket via webhook",
	"zendesk":   "Create a Zendesk ticket",
	"pagerduty": "Create a PagerDuty incident",
	"github":    "Create a GitHub issue",
	"jira":      "Create a Jira issue",
	"redmine":   "Create a Redmine issue",
	"slack":     "Post a ticket to Slack",
}

// toolTitle is the title of b's create tool: what it does in the target's
// own words, and the target's name when it is not just the kind's ("Create
// a Jira issue (ops)"). A binding of an unknown kind names its target.
func toolTitle(b Binding) string {
	title, ok := kindTitles[b.Kind]
	switch {
	case !ok:
		return "Create a ticket in " + b.Target
	case strings.EqualFold(b.Target, b.Kind):
		return title
	}
	return title + " (" + b.Target + ")"
}
