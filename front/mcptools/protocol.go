package mcptools

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/rpcguard"
)

// Protocol versions at which what the tools answer changes shape. Versions
// are dates, so they compare as strings.
const (
	// modernProtocol and later carry their version in each request's _meta;
	// their list results carry ttlMs and cacheScope.
	modernProtocol = rpcguard.ModernProtocol
	// latestLegacy is what the SDK negotiates in initialize for a version
	// it does not serve there.
	latestLegacy = "2025-11-25"
	// icons on tools arrived with 2025-11-25.
	iconsProtocol = "2025-11-25"
	// title, outputSchema and _meta on tools, structuredContent in
	// results, and the server's title arrived with 2025-06-18.
	structuredProtocol = "2025-06-18"
	// annotations on tools arrived with 2025-03-26.
	annotationsProtocol = "2025-03-26"
)

// capabilities are what the server has: tools, and nothing else. Its tool
// list is fixed when it starts, so it never sends list_changed; it has no
// prompts or resources, and logs nothing to the client.
func capabilities() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
}

// notServed are the methods of the features the server does not advertise
// (see capabilities). go-sdk answers them all (empty lists, a log level it
// never uses); a client that calls one is told it is not there.
var notServed = map[string]bool{
	"prompts/list":             true,
	"prompts/get":              true,
	"resources/list":           true,
	"resources/templates/list": true,
	"resources/read":           true,
	"resources/subscribe":      true,
	"resources/unsubscribe":    true,
	"logging/setLevel":         true,
	"completion/complete":      true,
}

// errNotServed is the answer to a method notServed names: -32601 on every
// transport, which go-sdk sends over HTTP with status 404 from 2026-07-28
// on, as that protocol asks.
func errNotServed(method string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
		Message: fmt.Sprintf("method not found: %q: this server has tools only", method)}
}

// byProtocol is the receiving middleware that answers each request with
// what its protocol version defines and the server has: a method of a
// feature the server lacks is not found, and the results of older versions
// leave out the fields that arrived later (go-sdk fills them in for every
// version).
func byProtocol() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if notServed[method] {
				return nil, errNotServed(method)
			}
			res, err := next(ctx, method, req)
			if err != nil {
				return res, err
			}
			return shape(res, protocolOf(req)), nil
		}
	}
}

// protocolOf is the protocol version req is served under: the one in its
// _meta for 2026-07-28 and later, else the one its session negotiated in
// initialize (go-sdk keeps what the client asked for, which may be a version
// it answered with another).
func protocolOf(req mcp.Request) string {
	if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
		if v, ok := p.GetMeta()[mcp.MetaKeyProtocolVersion].(string); ok && v >= modernProtocol {
			return v
		}
	}
	asked := ""
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		if ip := ss.InitializeParams(); ip != nil {
			asked = ip.ProtocolVersion
		}
	}
	if asked < modernProtocol && slices.Contains(mcp.SupportedProtocolVersions(), asked) {
		return asked
	}
	return latestLegacy
}

// shape returns res as protocol version v defines it.
func shape(res mcp.Result, v string) mcp.Result {
	if v >= modernProtocol {
		return res
	}
	switch r := res.(type) {
	case *mcp.ListToolsResult:
		out := &legacyToolList{NextCursor: r.NextCursor, Tools: make([]*mcp.Tool, len(r.Tools))}
		out.Meta = r.Meta
		for i, t := range r.Tools {
			out.Tools[i] = legacyTool(t, v)
		}
		return out
	case *mcp.InitializeResult:
		if v < structuredProtocol && r.ServerInfo != nil && r.ServerInfo.Title != "" {
			c, info := *r, *r.ServerInfo
			info.Title = ""
			c.ServerInfo = &info
			return &c
		}
	case *mcp.CallToolResult:
		if v < structuredProtocol && r.StructuredContent != nil {
			c := *r
			c.StructuredContent = nil
			return &c
		}
	}
	return res
}

// legacyToolList is a tools/list result before 2026-07-28: without the
// cache fields (ttlMs, cacheScope) that version introduced.
type legacyToolList struct {
	mcp.ResultBase
	NextCursor string      `json:"nextCursor,omitempty"`
	Tools      []*mcp.Tool `json:"tools"`
}

// legacyTool is t without the fields that arrived after version v.
func legacyTool(t *mcp.Tool, v string) *mcp.Tool {
	c := *t
	if v < iconsProtocol {
		c.Icons = nil
	}
	if v < structuredProtocol {
		c.Title, c.OutputSchema, c.Meta = "", nil, nil
	}
	if v < annotationsProtocol {
		c.Annotations = nil
	}
	return &c
}
