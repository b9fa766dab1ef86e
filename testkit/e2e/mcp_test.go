package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

const createTool = "create_ticket"

var ticketIDRE = regexp.MustCompile(`^tkt_[0-9a-hjkmnp-tv-z]{21}$`)

// createResult is create_ticket's structured answer.
type createResult struct {
	RequestID   string    `json:"request_id"`
	TicketID    string    `json:"ticket_id"`
	Target      string    `json:"target"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
	Replayed    bool      `json:"replayed"`
	ExternalID  string    `json:"external_id"`
	ExternalURL string    `json:"external_url"`
	Detail      string    `json:"detail"`
	Caller      *caller   `json:"caller,omitempty"`
}

// caller is who asked for a request, as the answers name it.
type caller struct {
	Subject string `json:"subject"`
	Name    string `json:"name,omitempty"`
	Email   string `json:"email,omitempty"`
}

// findResult is the part of find_request's answer the tests look at.
type findResult struct {
	RequestID   string `json:"request_id"`
	Status      string `json:"status"`
	TicketID    string `json:"ticket_id"`
	ExternalID  string `json:"external_id"`
	ExternalURL string `json:"external_url"`
	Detail      string `json:"detail"`
}

func ticketArgs(id, title string) map[string]any {
	return map[string]any{
		"request_id": id,
		"title":      title,
		"body":       "Steps to reproduce:\n1. call create_ticket\n2. drop the answer",
		"priority":   "high",
		"labels":     []string{"e2e", "idempotency"},
	}
}

// toolText is the text of a result's single text content.
func toolText(res *mcp.CallToolResult) (string, error) {
	if len(res.Content) != 1 {
		return "", fmt.Errorf("want 1 content item, got %d", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", fmt.Errorf("content is %T, not text", res.Content[0])
	}
	return tc.Text, nil
}

// decodeResult checks a successful tool result's shape: one text content
// holding a JSON object, the same object as the structured content, with no
// fields beyond v's.
func decodeResult(res *mcp.CallToolResult, v any) error {
	if res.IsError {
		txt, _ := toolText(res)
		return fmt.Errorf("tool error: %s", txt)
	}
	txt, err := toolText(res)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(txt))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("text content %q: %w", txt, err)
	}
	sc, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return fmt.Errorf("structured content: %w", err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(txt), &a); err != nil {
		return err
	}
	if err := json.Unmarshal(sc, &b); err != nil {
		return err
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		return fmt.Errorf("structured content %s differs from text content %s", sc, txt)
	}
	return nil
}

// create calls create_ticket and checks the answer is a well-formed result
// for args' request_id.
func create(ctx context.Context, cs *mcp.ClientSession, args map[string]any) (createResult, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: createTool, Arguments: args})
	if err != nil {
		return createResult{}, err
	}
	var r createResult
	if err := decodeResult(res, &r); err != nil {
		return r, err
	}
	return r, checkCreateResult(r, args["request_id"].(string))
}

func checkCreateResult(r createResult, id string) error {
	switch {
	case r.RequestID != id:
		return fmt.Errorf("result for request_id %q, want %q", r.RequestID, id)
	case !ticketIDRE.MatchString(r.TicketID):
		return fmt.Errorf("ticket_id %q is not a ticket id", r.TicketID)
	case r.Target != "local":
		return fmt.Errorf("target %q, want local", r.Target)
	case !r.Replayed && r.Status != "queued":
		return fmt.Errorf("status %q on a first call, want queued", r.Status)
	case r.Replayed && !findStatuses[r.Status]:
		return fmt.Errorf("status %q on a replay, want the request's current status", r.Status)
	case r.Detail == "":
		return fmt.Errorf("no detail")
	case r.CreatedAt.IsZero():
		return fmt.Errorf("no created_at")
	}
	return nil
}

func mustCreate(t testing.TB, cs *mcp.ClientSession, args map[string]any) createResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := create(ctx, cs, args)
	if err != nil {
		t.Fatalf("create_ticket %v: %v", args["request_id"], err)
	}
	return r
}

var findStatuses = map[string]bool{"unknown": true, "queued": true, "published": true, "delivered": true,
	"retrying": true, "failed": true, "uncertain": true}

func find(ctx context.Context, cs *mcp.ClientSession, id string) (findResult, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_request", Arguments: map[string]any{"request_id": id}})
	if err != nil {
		return findResult{}, err
	}
	var raw map[string]any
	if err := decodeResult(res, &raw); err != nil {
		return findResult{}, err
	}
	txt, _ := toolText(res)
	var r findResult
	if err := json.Unmarshal([]byte(txt), &r); err != nil {
		return r, err
	}
	switch {
	case r.RequestID != id:
		return r, fmt.Errorf("find_request answered for %q, want %q", r.RequestID, id)
	case !findStatuses[r.Status]:
		return r, fmt.Errorf("find_request: unknown status %q", r.Status)
	case r.Detail == "":
		return r, fmt.Errorf("find_request: no detail")
	case r.Status != "unknown" && !ticketIDRE.MatchString(r.TicketID):
		return r, fmt.Errorf("find_request: status %s with ticket_id %q", r.Status, r.TicketID)
	case r.Status == "delivered" && (r.ExternalID == "" || r.ExternalURL == ""):
		return r, fmt.Errorf("find_request: delivered without external id/url: %+v", r)
	}
	return r, nil
}

// waitDelivered polls find_request until every id is delivered.
func waitDelivered(t testing.TB, cs *mcp.ClientSession, timeout time.Duration, ids ...string) {
	t.Helper()
	pending := map[string]string{}
	for _, id := range ids {
		pending[id] = "never asked"
	}
	done := testwait.Until(timeout, func() bool {
		for id := range pending {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r, err := find(ctx, cs, id)
			cancel()
			if err != nil {
				t.Fatalf("find_request %s: %v", id, err)
			}
			switch r.Status {
			case "delivered":
				delete(pending, id)
			case "queued", "published":
				pending[id] = r.Status
			default:
				t.Fatalf("find_request %s: status %s: %s", id, r.Status, r.Detail)
			}
		}
		return len(pending) == 0
	})
	if !done {
		n := 0
		for id, st := range pending {
			if n++; n > 5 {
				break
			}
			t.Logf("still %s: %s", st, id)
		}
		t.Fatalf("%d of %d requests not delivered after %s", len(pending), len(ids), timeout)
	}
}

// ---- raw streamable HTTP (what the go-sdk client cannot send) ----

const rawProtocolVersion = "2025-11-25"

// rawInitialize opens a hand-driven session (e2eproc.RawSession).
func rawInitialize(t testing.TB, url string) *e2eproc.RawSession {
	t.Helper()
	return e2eproc.RawInitialize(t, url, rawProtocolVersion, "raw-e2e")
}
