package mcptools

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/tracing"
)

// traced is the go-sdk receiving middleware that gives each tools/call its
// span: a child of the trace context the caller sent in the request's
// _meta or, over HTTP, in its traceparent header (tracing.StartToolCall).
// The create handler names the request on it, measure its outcome.
func traced() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if !tracing.Enabled() {
				return next(ctx, method, req)
			}
			call, ok := req.(*mcp.CallToolRequest)
			if !ok || call.Params == nil {
				return next(ctx, method, req)
			}
			var header map[string][]string
			if extra := call.GetExtra(); extra != nil {
				header = extra.Header
			}
			ctx, span := tracing.StartToolCall(ctx, call.Params.Name, call.Params.Meta, header)
			res, err := next(ctx, method, req)
			tracing.End(span, err)
			return res, err
		}
	}
}
