package mcptools

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/metrics"
	"ticketrelay/tracing"
)

// outcomeKey is the context key of the *outcome of a tool call.
type outcomeKey struct{}

// outcome is what a tool handler says of one call, for measure to count.
type outcome struct {
	word     string // a metrics.Call* word; "" while no handler of ours ran
	argument string // with metrics.CallInvalid: the argument at fault, as boundedArg names it
	// For the audit trail (record): the scoped request id the call named,
	// the ticket it answered, and why it failed, in a few words.
	requestID, ticketID, reason string
}

// outcomeOf is the outcome a handler fills for the call ctx belongs to: an
// error until the handler says otherwise. Outside measure (a server built
// without it) it is a throwaway.
func outcomeOf(ctx context.Context) *outcome {
	o, ok := ctx.Value(outcomeKey{}).(*outcome)
	if !ok {
		o = &outcome{}
	}
	o.word = metrics.CallError
	return o
}

// measure is the go-sdk receiving middleware that counts the tool calls:
// every tools/call a handler of ours answered, by tool and outcome, its
// duration, and the replays, conflicts and invalid arguments among them.
// A call the SDK refused before any handler ran (an unknown tool) counts
// nothing, as no tool of ours saw it.
func measure(m *metrics.Front) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if !ok || call.Params == nil {
				return next(ctx, method, req)
			}
			o, ok := ctx.Value(outcomeKey{}).(*outcome) // record's, if it runs
			if !ok {
				o = &outcome{}
				ctx = context.WithValue(ctx, outcomeKey{}, o)
			}
			start := time.Now()
			res, err := next(ctx, method, req)
			if o.word != "" {
				o.count(ctx, m, call.Params.Name, time.Since(start))
			}
			return res, err
		}
	}
}

// count records one call of tool that took took.
func (o *outcome) count(ctx context.Context, m *metrics.Front, tool string, took time.Duration) {
	m.ToolCalls.WithLabelValues(tool, o.word).Inc()
	tracing.Observe(ctx, m.CallDuration.WithLabelValues(tool), took.Seconds())
	tracing.Outcome(ctx, o.word)
	switch o.word {
	case metrics.CallReplayed:
		m.Replays.WithLabelValues(tool).Inc()
	case metrics.CallConflict:
		m.Conflicts.WithLabelValues(tool).Inc()
	case metrics.CallInvalid:
		m.Rejected.WithLabelValues(tool, o.argument).Inc()
	}
}
