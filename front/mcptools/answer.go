package mcptools

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/metrics"
	"ticketrelay/ticket"
)

// invalid answers a create call that failed validation: nothing was
// written, which is certain, since validation comes before the ledger.
func invalid(o *outcome, err error) *mcp.CallToolResult {
	o.reject(err)
	return toolError(err.Error() + "; nothing was written")
}

// reject marks the call invalid, for measure to count, and returns the
// argument at fault.
func (o *outcome) reject(err error) string {
	arg := "arguments"
	var ie *ticket.InvalidError
	if errors.As(err, &ie) {
		arg = ie.Argument
	}
	o.word, o.argument = metrics.CallInvalid, boundedArg(arg)
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
		return nil, fmt.Errorf("mcptools: encode result: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
	}, nil
}
