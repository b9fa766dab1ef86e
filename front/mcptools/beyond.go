package mcptools

// add_comment and update_ticket: a comment on, or an update of, a ticket
// ticketrelay filed (named by what its create answered) or one it did not
// (the downstream's own key or URL, with the target). Each is a request
// with create's guarantee: one ledger row with its outbox row under the
// caller's request_id, replayed or refused as a conflict as a create is.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/failpoint"
	"ticketrelay/metrics"
	"ticketrelay/ticket"
)

// The tools beyond create.
const (
	AddCommentTool   = "add_comment"
	UpdateTicketTool = "update_ticket"
)

// Beyond is what a target takes beyond creates, as the front knows it
// from the configuration (targets.BeyondOf).
type Beyond struct {
	Comments bool
	// CommentsIdempotent: a comment's key is taken by the API, or an
	// unknown outcome is settled by a consistent lookup of its marker.
	CommentsIdempotent bool
	UpdateFields       []downstream.Field
}

// Tickets is the part of a store that names a ticket: the create that ref
// (a ticket id, or the request_id it was created under) names among
// subject's requests.
type Tickets interface {
	TicketOf(ctx context.Context, subject, ref string) (ticket.Ticket, bool, error)
}

// beyondTargets lists the targets of cfg that take comments, and those that
// take updates, sorted.
func beyondTargets(cfg Config) (comments, updates []string) {
	for name, b := range cfg.Beyond {
		if b.Comments {
			comments = append(comments, name)
		}
		if len(b.UpdateFields) > 0 {
			updates = append(updates, name)
		}
	}
	sort.Strings(comments)
	sort.Strings(updates)
	return comments, updates
}

// beyondTools names the tools beyond create that cfg's targets take.
func beyondTools(cfg Config) []string {
	comments, updates := beyondTargets(cfg)
	var names []string
	if len(comments) > 0 {
		names = append(names, AddCommentTool)
	}
	if len(updates) > 0 {
		names = append(names, UpdateTicketTool)
	}
	return names
}

// addBeyond registers add_comment and update_ticket where a target takes
// them.
func (s *Server) addBeyond(srv *mcp.Server, cfg Config) {
	s.beyond = cfg.Beyond
	s.access = cfg.Access
	s.toolsOf = map[string][]string{}
	for _, b := range cfg.Bindings {
		s.toolsOf[b.Target] = append(s.toolsOf[b.Target], b.Tool)
	}
	comments, updates := beyondTargets(cfg)
	if len(comments) > 0 {
		srv.AddTool(s.commentTool(comments), s.actionHandler(ticket.KindComment))
	}
	if len(updates) > 0 {
		srv.AddTool(s.updateTool(updates), s.actionHandler(ticket.KindUpdate))
	}
}

var (
	ticketArg = map[string]any{"type": "string", "minLength": 1, "maxLength": ticket.MaxTitleLen,
		"description": "The ticket: the ticket_id a create tool answered, or that create's request_id; or, for a ticket ticketrelay " +
			"did not file, the target's own key or URL (e.g. OPS-12, 123, https://…/issues/123), with target."}
	actionIDArg = map[string]any{
		"type": "string", "minLength": 1, "maxLength": ticket.MaxRequestIDLen, "pattern": `^[!-~]+$`,
		"description": "Idempotency key chosen by you: a fresh UUID for each new comment or update; the same value on every retry of it.",
	}
)

func targetArg(names []string) map[string]any {
	return map[string]any{"type": "string", "enum": names,
		"description": "Only for a ticket ticketrelay did not file: the target it lives in."}
}

func (s *Server) commentTool(targets []string) *mcp.Tool {
	idem := true
	var how []string
	for _, t := range targets {
		b := s.beyond[t]
		idem = idem && b.CommentsIdempotent
		if b.CommentsIdempotent {
			how = append(how, t+": exactly once")
		} else {
			how = append(how, t+": at most once (its outcome may be uncertain after a lost answer)")
		}
	}
	desc := "Add a comment to a ticket, exactly once per request_id where the target allows (" + strings.Join(how, "; ") + "). " +
		"A comment on a ticket whose creation is not delivered yet waits for it. After an error, a timeout or a dropped connection, " +
		"call find_request with the same request_id, and retry only with the SAME request_id and arguments."
	return &mcp.Tool{
		Name: AddCommentTool, Description: desc,
		Annotations: &mcp.ToolAnnotations{Title: "Comment on a ticket", DestructiveHint: boolPtr(false),
			IdempotentHint: idem, OpenWorldHint: boolPtr(true)},
		InputSchema: map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"request_id", "ticket", "body"},
			"properties": map[string]any{
				"request_id": actionIDArg, "ticket": ticketArg, "target": targetArg(targets),
				"body": map[string]any{"type": "string", "minLength": 1, "maxLength": ticket.MaxBodyLen,
					"description": fmt.Sprintf("The comment (plain text or Markdown), at most %d bytes.", ticket.MaxBodyLen)},
			},
		},
		OutputSchema: createOutputSchema,
	}
}

func (s *Server) updateTool(targets []string) *mcp.Tool {
	var how []string
	for _, t := range targets {
		fs := make([]string, len(s.beyond[t].UpdateFields))
		for i, f := range s.beyond[t].UpdateFields {
			fs[i] = string(f)
		}
		how = append(how, t+": "+strings.Join(fs, ", "))
	}
	desc := "Set fields of a ticket: each field given ends with that value, so a repeat changes nothing more. Fields per target: " +
		strings.Join(how, "; ") + ". An update of a ticket whose creation is not delivered yet waits for it."
	return &mcp.Tool{
		Name: UpdateTicketTool, Description: desc,
		Annotations: &mcp.ToolAnnotations{Title: "Update a ticket", DestructiveHint: boolPtr(false),
			IdempotentHint: true, OpenWorldHint: boolPtr(true)},
		InputSchema: map[string]any{
			"type": "object", "additionalProperties": false, "required": []string{"request_id", "ticket"},
			"properties": map[string]any{
				"request_id": actionIDArg, "ticket": ticketArg, "target": targetArg(targets),
				"status":   map[string]any{"type": "string", "enum": []string{"open", "closed"}, "description": "Set the ticket open or closed."},
				"priority": map[string]any{"type": "string", "enum": ticket.Priorities, "description": "Set the priority."},
				"labels": map[string]any{"type": "array", "maxItems": ticket.MaxLabels,
					"items": map[string]any{"type": "string", "minLength": 1, "maxLength": ticket.MaxLabelLen}, "description": "Set the whole set of labels."},
				"assignee": map[string]any{"type": "string", "description": "Set the assignee (the target's user reference); \"\" unassigns."},
			},
		},
		OutputSchema: createOutputSchema,
	}
}

type actionArgs struct {
	RequestID string    `json:"request_id"`
	Ticket    string    `json:"ticket"`
	Target    string    `json:"target"`
	Body      string    `json:"body"`
	Status    string    `json:"status"`
	Priority  string    `json:"priority"`
	Labels    *[]string `json:"labels"`
	Assignee  *string   `json:"assignee"`
}

func (s *Server) actionHandler(kind string) mcp.ToolHandler {
	tool := AddCommentTool
	if kind == ticket.KindUpdate {
		tool = UpdateTicketTool
	}
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		o := outcomeOf(ctx)
		var a actionArgs
		if err := decodeArgs(req.Params.Arguments, &a); err != nil {
			return invalid(o, err), nil
		}
		if kind == ticket.KindComment && (a.Status != "" || a.Priority != "" || a.Labels != nil || a.Assignee != nil) {
			return invalid(o, &ticket.InvalidError{Argument: "arguments", Reason: "add_comment takes request_id, ticket, body and target"}), nil
		}
		if kind == ticket.KindUpdate && a.Body != "" {
			return invalid(o, &ticket.InvalidError{Argument: "body", Reason: "is not an argument of update_ticket: use add_comment"}), nil
		}
		r := ticket.Request{RequestID: a.RequestID, Tool: tool, Body: a.Body, Subject: callerSubject(req), Caller: callerRecord(req)}
		if err := ticket.ValidateRequestID(a.RequestID); err != nil {
			return invalid(o, err), nil
		}
		o.request(r.Subject, r.RequestID)
		if res := s.resolve(ctx, o, &r, a, kind); res != nil {
			return res, nil
		}
		if !s.access.allowsTarget(callerOf(extraOf(req)), s.toolsOf[r.Target]) {
			o.word, o.reason = metrics.CallInvalid, "target not granted"
			return toolError(fmt.Sprintf("%s on a ticket of %s needs a grant of a create tool of that target (%s); nothing was done or written",
				tool, r.Target, strings.Join(s.toolsOf[r.Target], ", "))), nil
		}
		var err error
		if kind == ticket.KindComment {
			err = r.NormalizeComment()
		} else if err = s.setFields(&r, a); err == nil {
			err = r.NormalizeUpdate()
		}
		if err != nil {
			return invalid(o, err), nil
		}
		res, err := s.ledger.Create(ctx, r)
		if err != nil {
			return s.notCreated(ctx, o, tool, r.RequestID, err), nil
		}
		failpoint.Hit(failpoint.FrontAfterCommit)
		s.closeGroup(ctx, r)
		o.word, o.ticketID = metrics.CallCreated, res.TicketID
		if res.Replayed {
			o.word = metrics.CallReplayed
			return jsonResult(s.current(res))
		}
		detail := "Accepted and stored; it reaches " + r.Target + " asynchronously"
		if r.On != "" {
			detail += ", after the ticket's creation"
		}
		return jsonResult(createResult{Result: res, Caller: r.Caller.OrNil(),
			Detail: detail + ": find_request reports when. Do not send it again with a new request_id."})
	}
}

// resolve sets what r acts on from a's ticket and target: a create of the
// caller's, or the downstream's own reference on the named target. It
// answers the call itself (non-nil) when neither fits.
func (s *Server) resolve(ctx context.Context, o *outcome, r *ticket.Request, a actionArgs, kind string) *mcp.CallToolResult {
	if strings.TrimSpace(a.Ticket) == "" {
		return invalid(o, &ticket.InvalidError{Argument: "ticket", Reason: "is required"})
	}
	var t ticket.Ticket
	found := false
	if tk, ok := s.ledger.(Tickets); ok {
		var err error
		if t, found, err = tk.TicketOf(ctx, r.Subject, a.Ticket); err != nil {
			s.log.Error("resolving a ticket failed", "err", err)
			return toolError(fmt.Sprintf("could not read the ticket (%v); nothing was written; try again with the same request_id", err))
		}
	}
	switch {
	case found && a.Target != "" && a.Target != t.Target:
		return invalid(o, &ticket.InvalidError{Argument: "target", Reason: fmt.Sprintf("is %q, but ticket %s was filed in %q", a.Target, a.Ticket, t.Target)})
	case found:
		r.On, r.Target = t.Scoped(), t.Target
	case a.Target == "":
		return invalid(o, &ticket.InvalidError{Argument: "ticket", Reason: fmt.Sprintf("%q is no ticket_id or request_id of a ticket you created here; "+
			"for a ticket ticketrelay did not file, give its key or URL in the target and name the target", a.Ticket)})
	default:
		if _, known := s.beyond[a.Target]; !known {
			return invalid(o, &ticket.InvalidError{Argument: "target", Reason: fmt.Sprintf("%q is not a configured target", a.Target)})
		}
		r.Ref, r.Target = strings.TrimSpace(a.Ticket), a.Target
	}
	b := s.beyond[r.Target]
	if (kind == ticket.KindComment && !b.Comments) || (kind == ticket.KindUpdate && len(b.UpdateFields) == 0) {
		return invalid(o, &ticket.InvalidError{Argument: "ticket", Reason: fmt.Sprintf("its target %s does not take %ss", r.Target, kind)})
	}
	return nil
}

// setFields checks an update's fields against its target's and stores them
// in r, as downstream.CheckUpdate normalizes them.
func (s *Server) setFields(r *ticket.Request, a actionArgs) error {
	u := downstream.Update{Status: downstream.Status(a.Status), Priority: a.Priority, Labels: a.Labels, Assignee: a.Assignee}
	u, err := downstream.CheckUpdate(r.Target, s.beyond[r.Target].UpdateFields, u)
	if err != nil {
		return &ticket.InvalidError{Argument: "arguments", Reason: strings.TrimPrefix(err.Error(), "permanent error: ")}
	}
	r.Set, err = json.Marshal(u)
	return err
}

// allowsTarget reports whether c may act on tickets of a target whose
// create tools are tools: a comment or an update needs a grant of one.
func (a *Access) allowsTarget(c caller, tools []string) bool {
	if a == nil || (c.anonymous && !a.anonymous) {
		return true
	}
	return slices.ContainsFunc(tools, func(t string) bool { return a.allows(c, t) })
}

// withCreates is a with the create tools: add_comment and update_ticket
// are listed to, and admitted for, a caller granted one of them; a caller
// granted none (a read-only caller) never sees them.
func (a *Access) withCreates(creates []string) *Access {
	if a == nil {
		return nil
	}
	c := *a
	c.creates = creates
	return &c
}
