package mcptools

import (
	"context"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/metrics"
	"ticketrelay/request"
	"ticketrelay/ticket"
)

// NoopToolPrefix starts the name of the benchmark twin of a create tool.
const NoopToolPrefix = "bench_noop_"

// AddNoopTool registers, for benchmarks only, NoopToolPrefix+b.Tool: a twin
// of b's create tool with exactly its input schema, argument decoding,
// validation, metrics and result shape, but no ledger write. It is the
// baseline against which the cost of the durable create is measured on the
// same server build. srv must be one New built: its middleware counts the
// twin's calls as it counts the others. It returns the tool's name.
func AddNoopTool(srv *mcp.Server, b Binding, log *slog.Logger) string {
	s := &Server{log: log}
	t := createTool(b)
	t.Name = NoopToolPrefix + b.Tool
	t.Title = "Benchmark baseline: " + b.Tool + " without the ledger write"
	t.Description = "For benchmarks only: validates the arguments of " + b.Tool + " and answers as it would, " +
		"but stores nothing and creates no ticket."
	srv.AddTool(t, s.noopHandler(b))
	return t.Name
}

func (s *Server) noopHandler(b Binding) mcp.ToolHandler {
	accepted := acceptedDetail(b.Target)
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		o := outcomeOf(ctx)
		r, _, err := decodeCreate(b, req.Params.Arguments)
		if err != nil {
			return invalid(o, err), nil
		}
		o.word = metrics.CallCreated
		return jsonResult(createResult{Result: request.Result{RequestID: r.RequestID, TicketID: ticket.IDFor(r.RequestID), Target: r.Target,
			Status: request.StatusQueued, CreatedAt: start.UTC()}, Detail: accepted})
	}
}
