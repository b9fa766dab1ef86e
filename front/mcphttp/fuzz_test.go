package mcphttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/delivery/downstream"
	"ticketrelay/front/mcphttp"
	"ticketrelay/front/mcptools"
	"ticketrelay/metrics"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// The fuzzed server's tools: one bound to a keyed target, one to a target
// without key.
const (
	fzKeyedTool   = "create_ticket"
	fzUnkeyedTool = "file_issue"
	fzProtocol    = "2025-11-25"
)

// fzServer is mcphttp.NewHandler on a real ledger in a temporary
// directory, with one session opened through the handler itself.
type fzServer struct {
	db      *sqlitedb.DB
	h       *mcphttp.Handler
	session string
}

func newFzServer(f *testing.F) *fzServer {
	log := slog.New(slog.DiscardHandler)
	m := metrics.NewFront(prometheus.NewRegistry())
	l := fixture.NewLedger(f, fixture.WriterMetrics(m.Writer))
	srv, err := mcptools.New(mcptools.Config{Version: "fuzz", Bindings: []mcptools.Binding{
		{Tool: fzKeyedTool, Target: "local", Capabilities: downstream.Capabilities{DedupeKey: true, Lookup: downstream.LookupConsistent}},
		{Tool: fzUnkeyedTool, Target: "tracker", Capabilities: downstream.Capabilities{}},
	}}, l.Ledger, m, log)
	if err != nil {
		f.Fatal(err)
	}
	h := mcphttp.NewHandler(srv, mcphttp.Config{Logger: log})
	f.Cleanup(h.Close)
	s := &fzServer{db: l.DB, h: h}
	if err := s.open(); err != nil {
		f.Fatal(err)
	}
	return s
}

// open starts a new session: initialize, then notifications/initialized.
func (s *fzServer) open() error {
	rec := s.post(0, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+fzProtocol+
		`","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}`), "")
	s.session = rec.Header().Get("Mcp-Session-Id")
	if rec.Code != http.StatusOK || s.session == "" {
		return &fzError{"initialize", rec}
	}
	if rec := s.post(0, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), s.session); rec.Code != http.StatusAccepted {
		return &fzError{"notifications/initialized", rec}
	}
	return nil
}

type fzError struct {
	what string
	rec  *httptest.ResponseRecorder
}

func (e *fzError) Error() string {
	return e.what + ": HTTP " + http.StatusText(e.rec.Code) + " " + e.rec.Body.String()
}

// post serves one POST; mode picks the headers: 0 the session's, 1 no
// session, 2 the stateless protocol, 3 a wrong content type.
func (s *fzServer) post(mode uint8, body []byte, session string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	switch mode % 4 {
	case 0:
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", fzProtocol)
		}
	case 2:
		// Stateless requests name their method in a header, and the tool
		// call's tool in another.
		req.Header.Set("Mcp-Protocol-Version", mcphttp.StatelessProtocol)
		var m struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &m)
		req.Header.Set("Mcp-Method", m.Method)
		if m.Params.Name != "" {
			req.Header.Set("Mcp-Name", m.Params.Name)
		}
	case 3:
		req.Header.Set("Content-Type", "text/plain")
	}
	// A create may ask to wait up to 45 s for a delivery that never comes
	// (no dispatcher here): the client gives up first, as one would.
	ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
	defer cancel()
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req.WithContext(ctx))
	return rec
}

func (s *fzServer) rows(t *testing.T) map[string]string {
	t.Helper()
	rs, err := s.db.Reader().Query(`SELECT r.request_id, t.title FROM requests r JOIN tickets t USING (request_id)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var id, title string
		if err := rs.Scan(&id, &title); err != nil {
			t.Fatal(err)
		}
		out[id] = title
	}
	return out
}

// FuzzHTTPBody sends arbitrary POST bodies through the HTTP handler: it
// never panics, never answers 5xx (none is documented), and writes a ledger
// row only for a tools/call request of a create tool whose arguments are
// valid, and then exactly that row.
func FuzzHTTPBody(f *testing.F) {
	s := newFzServer(f)
	valid := func(id, tool, args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`)
	}
	for i, b := range [][]byte{
		valid("2", fzKeyedTool, `{"request_id":"seed-1","title":"Disk full"}`),
		valid(`"x"`, fzUnkeyedTool, `{"request_id":"seed-2","title":"Login fails","body":"b","priority":"high","labels":["a","b"],"wait_for_delivery_seconds":0}`),
		valid("3", fzKeyedTool, `{"request_id":"seed-1","title":"Other"}`),
		valid("4", fzKeyedTool, `{"request_id":"a b","title":"t"}`),
		valid("5", fzKeyedTool, `{"request_id":"seed-5","title":"t","extra":1}`),
		valid("6", fzKeyedTool, `{"request_id":"seed-6","title":"t","wait_for_delivery_seconds":99}`),
		valid("17", fzKeyedTool, `{"request_id":"seed-17","title":"t","wait_for_delivery_seconds":3}`),
		valid("7", "find_request", `{"request_id":"seed-1"}`),
		valid("8", "nope", `{}`),
		valid("null", fzKeyedTool, `{"request_id":"seed-9","title":"t"}`),
		[]byte(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"seed-10","title":"t"}}}`),
		[]byte(`[{"jsonrpc":"2.0","id":11,"method":"tools/list"}]`),
		[]byte(`{"jsonrpc":"2.0","id":12,"method":"tools/list"}`),
		[]byte(`{"jsonrpc":"2.0","id":13,"method":"ping"}`),
		[]byte(`{"jsonrpc":"2.0","id":14,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`),
		[]byte(`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"seed-15","title":"t"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"fuzz","version":"0"}}}}`),
		[]byte(`{not json`),
		[]byte(``),
		[]byte(`"str"`),
		[]byte(`{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"seed-16","title":"bad ` + "\xff" + `"}}}`),
	} {
		// Every body on the session; some also without one, statelessly and
		// with a wrong content type.
		f.Add(uint8(0), b)
		f.Add(uint8(1+i%3), b)
	}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		before := s.rows(t)
		rec := s.post(mode, body, s.session)
		if rec.Code >= 500 {
			t.Fatalf("HTTP %d for body %q: %s", rec.Code, body, rec.Body.String())
		}
		after := s.rows(t)
		id, title, ok := fzValidCreate(body)
		if ok && mode%4 == 0 && rec.Code == http.StatusOK && before[id] == "" && after[id] != title {
			// The converse, on a live session: a valid create of a new id is stored.
			t.Fatalf("a valid create was not stored (HTTP %d %s): %q", rec.Code, rec.Body.String(), body)
		}
		if len(after) > len(before) {
			switch {
			case !ok:
				t.Fatalf("a body that is no valid create wrote %d rows: %q", len(after)-len(before), body)
			case len(after)-len(before) != 1:
				t.Fatalf("one create wrote %d rows: %q", len(after)-len(before), body)
			case before[id] != "" || after[id] != title:
				t.Fatalf("the create of %q wrote another row (title %q): %q", id, after[id], body)
			}
		}
		if mode%4 == 0 && rec.Code == http.StatusNotFound {
			// The body ended the session: open another for the next input.
			if err := s.open(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// fzValidCreate is an oracle independent of mcptools: it reports whether
// body is a JSON-RPC request (with an id) calling a create tool with valid
// arguments, and returns its request id and title.
func fzValidCreate(body []byte) (id, title string, ok bool) {
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.JSONRPC != "2.0" || msg.Method != "tools/call" ||
		len(msg.ID) == 0 || string(msg.ID) == "null" || (msg.Params.Name != fzKeyedTool && msg.Params.Name != fzUnkeyedTool) {
		return "", "", false
	}
	if !utf8.Valid(msg.Params.Arguments) {
		return "", "", false
	}
	var a struct {
		RequestID string   `json:"request_id"`
		Title     string   `json:"title"`
		Body      string   `json:"body"`
		Priority  string   `json:"priority"`
		Labels    []string `json:"labels"`
		Wait      int      `json:"wait_for_delivery_seconds"`
	}
	dec := json.NewDecoder(bytes.NewReader(msg.Params.Arguments))
	dec.DisallowUnknownFields()
	if dec.Decode(&a) != nil || dec.More() || a.Wait < 0 || a.Wait > mcptools.MaxWaitForDelivery {
		return "", "", false
	}
	r := ticket.Request{RequestID: a.RequestID, Tool: msg.Params.Name, Target: "local", Title: a.Title, Body: a.Body, Priority: a.Priority, Labels: a.Labels}
	if r.Normalize() != nil || strings.TrimSpace(r.Title) == "" {
		return "", "", false
	}
	return r.RequestID, r.Title, true
}
