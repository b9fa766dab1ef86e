package mcptools_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/store/ledger"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
)

// Tool names used by the test server: one bound to a target with a dedupe
// key, one bound to a target without key and without lookup.
const (
	keyedTool   = "create_ticket"
	keyedTarget = "local"
	unkeyedTool = "create_webhook_ticket"
	unkeyedTgt  = "webhook"
)

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// env is a real ledger on a real SQLite file and the MCP server built on it.
type env struct {
	db  *sqlitedb.DB
	w   *sqlitedb.Writer
	l   *ledger.Ledger
	m   *metrics.Front
	srv *mcp.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with the tools holding callers to access.
func newEnvWith(t *testing.T, access *mcptools.Access) *env {
	t.Helper()
	m := metrics.NewFront(prometheus.NewRegistry())
	f := fixture.NewLedger(t, fixture.Logger(testLogger()), fixture.WriterMetrics(m.Writer))
	l := f.Ledger
	srv, err := mcptools.New(mcptools.Config{
		Version: "test",
		Bindings: []mcptools.Binding{
			{Tool: keyedTool, Description: "Open a ticket in the local tracker.", Target: keyedTarget, Kind: "local",
				Capabilities: downstream.Capabilities{DedupeKey: true, Lookup: downstream.LookupConsistent}},
			{Tool: unkeyedTool, Description: "Post a ticket to the webhook.", Target: unkeyedTgt, Kind: "webhook",
				Capabilities: downstream.Capabilities{DedupeKey: false, Lookup: downstream.LookupNone}},
		},
		Access: access,
	}, l, m, testLogger())
	if err != nil {
		t.Fatalf("mcptools.New: %v", err)
	}
	return &env{db: f.DB, w: f.Writer, l: l, m: m, srv: srv}
}

// connect opens a real go-sdk client session over in-memory transports.
func (e *env) connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := e.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// rows counts what a create writes: ledger rows, tickets, outbox rows.
type rows struct{ requests, tickets, outbox int }

func (e *env) rows(t *testing.T) rows {
	t.Helper()
	var r rows
	for _, q := range []struct {
		table string
		n     *int
	}{{"requests", &r.requests}, {"tickets", &r.tickets}, {"outbox", &r.outbox}} {
		if err := e.db.Reader().QueryRow("SELECT count(*) FROM " + q.table).Scan(q.n); err != nil {
			t.Fatalf("count %s: %v", q.table, err)
		}
	}
	return r
}

func newID() string { return uuid.NewString() }

func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %s: %v", tool, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// createResult is the structured content of a create tool.
type createResult struct {
	RequestID   string    `json:"request_id"`
	TicketID    string    `json:"ticket_id"`
	Target      string    `json:"target"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
	Replayed    *bool     `json:"replayed"`
	ExternalID  string    `json:"external_id"`
	ExternalURL string    `json:"external_url"`
	Detail      string    `json:"detail"`
}

// findResult is the structured content of find_request.
type findResult struct {
	RequestID string `json:"request_id"`
	Status    string `json:"status"`
	TicketID  string `json:"ticket_id"`
	Target    string `json:"target"`
	Detail    string `json:"detail"`
}

func structured[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	var v T
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	if res.StructuredContent == nil {
		t.Fatalf("no structured content; text %q", text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("re-encode structured content: %v", err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode structured content %s: %v", b, err)
	}
	// The text content carries the same JSON for clients that ignore
	// structured content.
	var fromText T
	if err := json.Unmarshal([]byte(text(res)), &fromText); err != nil {
		t.Fatalf("text content is not the JSON result: %q: %v", text(res), err)
	}
	return v
}
