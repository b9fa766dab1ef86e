package mcphttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func discoverBody(meta bool) []byte {
	if !meta {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`)
	}
	return []byte(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"claude-code-like","version":"0"}}}}`)
}

// TestDiscoverAnswersAtOnce follows Claude Code's health check: it first
// POSTs server/discover with MCP-Protocol-Version 2026-07-28 and no Origin,
// and must get either a discover result naming 2026-07-28 (it proceeds on
// that protocol) or one of the answers that make it fall back to initialize
// at once (HTTP 400, 404 or 405, or JSON-RPC -32601) — never a session-bound
// refusal, a 5xx or a hang. In both modes the full request gets a result.
func TestDiscoverAnswersAtOnce(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			e := newTenv(t)
			ts, _ := e.serve(t, Config{Stateless: stateless})
			c := &wire{t: t, url: ts.URL, version: StatelessProtocol, header: http.Header{"Mcp-Method": {"server/discover"}}}

			resp := c.do(c.req(http.MethodPost, discoverBody(true)))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "" {
				t.Fatalf("server/discover: HTTP %d, session %q; want 200 without a session", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"))
			}
			m := readResponse(t, resp)
			var res struct {
				SupportedVersions []string        `json:"supportedVersions"`
				Capabilities      json.RawMessage `json:"capabilities"`
			}
			if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
				t.Fatalf("server/discover: %+v %s", m.Error, m.Result)
			}
			if !slices.Contains(res.SupportedVersions, StatelessProtocol) || !slices.Contains(res.SupportedVersions, SessionProtocol) {
				t.Errorf("supportedVersions %v: want %s (stateless) and %s", res.SupportedVersions, StatelessProtocol, SessionProtocol)
			}
			if string(res.Capabilities) != `{"tools":{}}` {
				t.Errorf("capabilities %s: want tools only (no prompts, resources or logging: the server has none)", res.Capabilities)
			}

			// A method the server does not serve is not found: -32601, which
			// the SDK answers with 404, as 2026-07-28 asks of HTTP.
			c.header = http.Header{"Mcp-Method": {"prompts/list"}}
			resp = c.do(c.req(http.MethodPost, []byte(strings.Replace(string(discoverBody(true)), "server/discover", "prompts/list", 1))))
			if m := readResponse(t, resp); resp.StatusCode != http.StatusNotFound || m.Error == nil || m.Error.Code != -32601 {
				t.Errorf("prompts/list: HTTP %d, error %+v; want 404 with -32601", resp.StatusCode, m.Error)
			}
			c.header = http.Header{"Mcp-Method": {"server/discover"}}

			// A bare discover (no _meta) must still be answered with a fallback
			// status, not left to a 5xx or a timeout.
			resp = c.do(c.req(http.MethodPost, discoverBody(false)))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
			default:
				t.Errorf("bare server/discover: HTTP %d %s; want 400, 404 or 405", resp.StatusCode, b)
			}
		})
	}
}

// TestBothProtocolVersions: the go-sdk client speaks 2026-07-28 when it may
// (server/discover first) and 2025-11-25 when told to; both create and
// replay tickets in both modes. Only 2025-11-25 without -stateless has a
// session.
func TestBothProtocolVersions(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		for _, version := range []string{"", SessionProtocol} {
			t.Run(fmt.Sprintf("stateless=%v/version=%q", stateless, version), func(t *testing.T) {
				e := newTenv(t)
				ts, _ := e.serve(t, Config{Stateless: stateless})
				cs := connect(t, ts.URL, version, nil, nil)
				got := cs.InitializeResult().ProtocolVersion
				want := StatelessProtocol
				if version != "" {
					want = version
				}
				if got != want {
					t.Fatalf("negotiated %s, want %s", got, want)
				}
				wantSession := !stateless && version == SessionProtocol
				if (cs.ID() != "") != wantSession {
					t.Errorf("session id %q: want a session: %v", cs.ID(), wantSession)
				}
				rid := newRID()
				params := &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": rid, "title": "both versions"}}
				first := callCreate(t, cs, params)
				again := callCreate(t, connect(t, ts.URL, version, nil, nil), params)
				if first.Replayed || !again.Replayed || again.TicketID != first.TicketID || first.Status != "queued" {
					t.Errorf("first %+v, retry on a new connection %+v", first, again)
				}
				if n := e.tickets(t); n != 1 {
					t.Errorf("%d tickets, want 1", n)
				}
			})
		}
	}
}

// TestStatelessModeRefusesSessions: with -stateless, a 2025-11-25 initialize
// gets no session id and GET/DELETE get 405 — nothing a load balancer would
// have to pin.
func TestStatelessModeRefusesSessions(t *testing.T) {
	e := newTenv(t)
	ts, _ := e.serve(t, Config{Stateless: true})
	c := &wire{t: t, url: ts.URL}
	resp := c.do(c.req(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"w","version":"0"}}}`)))
	if m := readResponse(t, resp); m.Result == nil || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("initialize: %+v, session %q", m, resp.Header.Get("Mcp-Session-Id"))
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		resp := c.do(c.req(method, nil))
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: HTTP %d, want 405", method, resp.StatusCode)
		}
	}
}
