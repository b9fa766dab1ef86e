package mcptools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcpauth"
	"ticketrelay/metrics"
)

// Grant gives the callers it names tools (config.Grant, resolved): who is
// one of Subject, Group, Scope or Anonymous.
type Grant struct {
	Subject   string // a static token's subject, a signed-in user's sub or full subject (mcpauth.Principal.ID)
	Group     string // a group of a signed-in user
	Scope     string // a scope of a signed-in user's access token
	Anonymous bool   // the caller without a token (stdio, HTTP without authentication)
	Tools     []string
}

// Access says which tools each caller may call, from the configured
// grants: a caller may call the tools of every grant that names it, and
// nothing else. The caller without a token is held to the grants only if
// one names it (Anonymous): a local user on stdio owns the installation
// anyway. A nil *Access lets every caller call every tool.
type Access struct {
	grants    []Grant
	anonymous bool     // a grant names the caller without a token
	creates   []string // the create tools, which grant add_comment and update_ticket (beyond.go)
}

// NewAccess returns the Access of grants; nil (no restriction) without any.
func NewAccess(grants []Grant) *Access {
	if len(grants) == 0 {
		return nil
	}
	a := &Access{grants: grants}
	for _, g := range grants {
		a.anonymous = a.anonymous || g.Anonymous
	}
	return a
}

// HoldsAnonymous reports whether the caller without a token is held to the
// grants (a grant names it).
func (a *Access) HoldsAnonymous() bool { return a != nil && a.anonymous }

// caller is who makes a call, as the grants match it.
type caller struct {
	userID    string // TokenInfo.UserID: a static token's subject, or Principal.ID
	principal mcpauth.Principal
	signedIn  bool // an OAuth access token: principal is set
	anonymous bool // no token at all
}

func callerOf(ti *auth.TokenInfo) caller {
	if ti == nil {
		return caller{anonymous: true}
	}
	p, ok := mcpauth.FromTokenInfo(ti)
	return caller{userID: ti.UserID, principal: p, signedIn: ok}
}

// String names the caller in a refusal.
func (c caller) String() string {
	switch {
	case c.anonymous:
		return "the caller without a token"
	case c.signedIn:
		return "signed-in user " + c.principal.Subject
	}
	return "subject " + c.userID
}

// names reports whether g names c. A static token matches by subject
// only: the scopes and groups it carries are none.
func (g Grant) names(c caller) bool {
	switch {
	case g.Anonymous:
		return c.anonymous
	case g.Subject != "":
		return !c.anonymous && (g.Subject == c.userID || (c.signedIn && g.Subject == c.principal.Subject))
	case g.Group != "":
		return c.signedIn && slices.Contains(c.principal.Groups, g.Group)
	case g.Scope != "":
		return c.signedIn && slices.Contains(c.principal.Scopes, g.Scope)
	}
	return false
}

// allows reports whether c may call tool.
func (a *Access) allows(c caller, tool string) bool {
	if a == nil || (c.anonymous && !a.anonymous) {
		return true
	}
	if tool == AddCommentTool || tool == UpdateTicketTool {
		return a.allowsTarget(c, a.creates)
	}
	for _, g := range a.grants {
		if g.names(c) && slices.Contains(g.Tools, tool) {
			return true
		}
	}
	return false
}

// StepUpScope is the OAuth scope that would let the signed-in caller of ti
// call tool, which it may not: the first grant of a scope that gives tool.
// "" if it may call it, if it did not sign in (a static token cannot step
// up) or if no scope gives tool.
func (a *Access) StepUpScope(ti *auth.TokenInfo, tool string) string {
	c := callerOf(ti)
	if !c.signedIn || a.allows(c, tool) {
		return ""
	}
	for _, g := range a.grants {
		if g.Scope != "" && slices.Contains(g.Tools, tool) {
			return g.Scope
		}
	}
	return ""
}

// refusal is the tool error of a call c may not make: it names what would
// grant tool (its scopes and groups; subjects only by their number, as
// they name other people).
func (a *Access) refusal(c caller, tool string) string {
	var what []string
	subjects := 0
	for _, g := range a.grants {
		if !slices.Contains(g.Tools, tool) {
			continue
		}
		switch {
		case g.Scope != "":
			what = append(what, fmt.Sprintf("scope %q", g.Scope))
		case g.Group != "":
			what = append(what, fmt.Sprintf("group %q", g.Group))
		case g.Subject != "":
			subjects++
		case g.Anonymous:
			what = append(what, "the caller without a token")
		}
	}
	if subjects > 0 {
		what = append(what, fmt.Sprintf("%d named subject(s)", subjects))
	}
	msg := fmt.Sprintf("%s is not granted to %s, so nothing was done or written. ", tool, c)
	if len(what) == 0 {
		return msg + "No grant of this server's configuration gives it to anyone."
	}
	return msg + "It is granted to " + strings.Join(slices.Compact(what), ", ") +
		": sign in with what it needs, or ask the administrator for a grant."
}

// byGrant is the receiving middleware that holds each caller to its
// grants: tools/list shows it the tools it may call, and a call of any
// other tool of this server (known) is refused with a tool error that
// names what is missing, before any handler runs, and counted by tool.
// A name that is no tool is left to the SDK, which says so.
func (a *Access) byGrant(known []string, m *metrics.Front) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		if a == nil {
			return next
		}
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			c := callerOf(extraOf(req))
			if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil &&
				slices.Contains(known, call.Params.Name) && !a.allows(c, call.Params.Name) {
				m.ToolRefused.WithLabelValues(call.Params.Name).Inc()
				if o, ok := ctx.Value(outcomeKey{}).(*outcome); ok { // record's
					o.word, o.reason = callRefused, "not granted"
				}
				return toolError(a.refusal(c, call.Params.Name)), nil
			}
			res, err := next(ctx, method, req)
			if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				shown := *list
				shown.Tools = slices.DeleteFunc(slices.Clone(list.Tools), func(t *mcp.Tool) bool { return !a.allows(c, t.Name) })
				return &shown, nil
			}
			return res, err
		}
	}
}

// extraOf is the token of req's caller, nil without one.
func extraOf(req mcp.Request) *auth.TokenInfo {
	if e := req.GetExtra(); e != nil {
		return e.TokenInfo
	}
	return nil
}
