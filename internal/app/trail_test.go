package app_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/front/mcpauth/mcpauthtest"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/request"
	"ticketrelay/store"
	"ticketrelay/store/trail"
	"ticketrelay/testkit/testio"
	"ticketrelay/testkit/testwait"
	"ticketrelay/ticket"
)

// auditEntries runs `dispatcher audit -json` on the database at db with
// extra flags, and decodes its lines.
func auditEntries(t *testing.T, db string, extra ...string) []trail.Entry {
	t.Helper()
	out, stderr, err := runOnce(t, dispatcher.Run, newEnv(), append([]string{"audit", "-json", "-db", db}, extra...)...)
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, stderr)
	}
	return decodeLines(t, out)
}

func decodeLines(t *testing.T, text string) []trail.Entry {
	t.Helper()
	var out []trail.Entry
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var e trail.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// trailRows is the trail table as text, every column of every row.
func trailRows(t *testing.T, db string) string {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+db+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT * FROM trail`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if raw, ok := v.([]byte); ok {
				v = string(raw)
			}
			fmt.Fprint(&b, v, " ")
		}
		fmt.Fprintln(&b)
	}
	return b.String()
}

// TestTrailRecordsEveryToolCall: mcp-front over HTTP, called through the
// go-sdk client by static-token and signed-in callers, records each call
// in the audit trail exactly once, with the subject, the client's name and
// version, the tool, the scoped request id, the outcome (accepted,
// replayed, conflict, invalid, refused by a grant, refused at HTTP by the
// step-up, error, ok) and the ticket id; neither the table nor the
// dispatcher's -audit-file holds a token or the ticket's body.
func TestTrailRecordsEveryToolCall(t *testing.T) {
	is := mcpauthtest.NewIssuer(t)
	listen := freePort(t)
	resource := "http://" + listen + "/mcp"
	const (
		botToken    = "bot-0123456789abcdef0123456789ab"
		viewerToken = "viewer-0123456789abcdef01234567"
		body        = "The printer on floor 3 is on fire; serial SN-7731-SECRET"
	)
	dir := t.TempDir()
	db := filepath.Join(dir, "tickets.db")
	cfg := writeFile(t, "grants.yaml", grantsConfig)
	env := newEnv("TICKETRELAY_OAUTH_ISSUER", is.URL(), "TICKETRELAY_AUTH_TOKENS", "bot:"+botToken+",viewer:"+viewerToken)
	start(t, front.Run, env, "-listen", listen, "-metrics-listen", "", "-config", cfg,
		"-auth-resource", resource, "-oauth-scopes", "tickets", "-create-db", "-db", db)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(token string) *mcp.ClientSession {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "trail-test-client", Version: "1.2.3"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: resource, HTTPClient: &http.Client{Transport: &recordingRT{token: token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	callTool := func(cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v", tool, args, err)
		}
		return res
	}

	bot := connect(botToken)
	args := map[string]any{"request_id": "r-1", "title": "Printer on fire", "body": body}
	if res := callTool(bot, "create_ticket", args); res.IsError {
		t.Fatalf("create: %v", res.Content)
	}
	callTool(bot, "create_ticket", args) // replayed
	if res := callTool(bot, "create_ticket", map[string]any{"request_id": "r-1", "title": "Another", "body": body}); !res.IsError {
		t.Fatal("a conflicting create was not refused")
	}
	if res := callTool(bot, "create_ticket", map[string]any{"request_id": "r-2", "body": body}); !res.IsError {
		t.Fatal("a create without a title was not refused")
	}
	callTool(bot, "find_request", map[string]any{"request_id": "r-1"})
	if res := callTool(connect(viewerToken), "create_ticket", map[string]any{"request_id": "r-3", "title": "T"}); !res.IsError {
		t.Fatal("the viewer's create was not refused")
	}
	// A signed-in reader is refused at HTTP (403, step-up to tickets.write).
	claims := is.Claims("ada", resource, time.Now())
	claims["scope"] = "tickets"
	ada := connect(is.Mint(claims))
	if _, err := ada.CallTool(ctx, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": "r-4", "title": "T"}}); err == nil {
		t.Fatal("the reader's create was not refused")
	}
	// A storage error: the database refuses the ledger's insert.
	raw, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TRIGGER inject_failure BEFORE INSERT ON requests BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	if res := callTool(bot, "create_ticket", map[string]any{"request_id": "r-5", "title": "T", "body": body}); !res.IsError {
		t.Fatal("a create the database refused was not an error")
	}
	if _, err := raw.Exec(`DROP TRIGGER inject_failure`); err != nil {
		t.Fatal(err)
	}

	var got []trail.Entry
	testwait.For(t, 10*time.Second, "8 entries in the trail", func() bool { got = auditEntries(t, db); return len(got) >= 8 })
	if len(got) != 8 {
		t.Fatalf("%d entries, want 8:\n%+v", len(got), got)
	}
	ticketID := ticket.IDFor("bot:r-1")
	want := []struct {
		subject, tool, request, outcome, ticketID, reason string
		client                                            bool
	}{
		{"bot", "create_ticket", "bot:r-1", trail.Accepted, ticketID, "", true},
		{"bot", "create_ticket", "bot:r-1", trail.Replayed, ticketID, "", true},
		{"bot", "create_ticket", "bot:r-1", trail.Conflict, ticketID, "", true},
		{"bot", "create_ticket", "bot:r-2", trail.Invalid, "", "title", true},
		{"bot", "find_request", "bot:r-1", trail.OK, ticketID, "", true},
		{"viewer", "create_ticket", "", trail.Refused, "", "not granted", true},
		{"ada", "create_ticket", "", trail.Refused, "", "insufficient_scope", false},
		{"bot", "create_ticket", "bot:r-5", trail.Error, "", "storage error", true},
	}
	for i, w := range want {
		e := got[i]
		subjectOK := e.Subject == w.subject || (w.subject == "ada" && strings.Contains(e.Subject, "ada") && strings.Contains(e.Subject, "http"))
		clientOK := !w.client || (e.Client == "trail-test-client" && e.ClientVersion == "1.2.3")
		if !subjectOK || e.Tool != w.tool || e.RequestID != w.request || e.Outcome != w.outcome || e.TicketID != w.ticketID ||
			e.Reason != w.reason || !clientOK || e.Kind != trail.KindCall || time.Since(e.Time) > time.Minute {
			t.Errorf("entry %d: %+v\nwant %+v", i, e, w)
		}
	}

	// ForRequest, the console's read, gives the request's calls.
	store, err := trail.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if mine, err := store.ForRequest(ctx, "bot:r-1"); err != nil || len(mine) != 4 {
		t.Errorf("ForRequest(bot:r-1): %d entries, %v; want 4", len(mine), err)
	}
	// The command's filters.
	if n := len(auditEntries(t, db, "-outcome", "refused")); n != 2 {
		t.Errorf("audit -outcome refused: %d entries, want 2", n)
	}
	if n := len(auditEntries(t, db, "-subject", "viewer", "-tool", "create_ticket")); n != 1 {
		t.Errorf("audit -subject viewer -tool create_ticket: %d entries, want 1", n)
	}
	if n := len(auditEntries(t, db, "-request-id", "bot:r-1", "-since", "1h")); n != 4 {
		t.Errorf("audit -request-id bot:r-1 -since 1h: %d entries, want 4", n)
	}

	// The dispatcher's file sink writes the same entries.
	file := filepath.Join(dir, "audit.jsonl")
	start(t, dispatcher.Run, newEnv(), dispatcherArgs(dir, "-config", cfg, "-audit-file", file)...)
	var lines string
	testwait.For(t, 10*time.Second, "8 lines in the audit file", func() bool {
		b, _ := os.ReadFile(file)
		lines = string(b)
		return strings.Count(lines, "\n") >= 8
	})
	if fromFile := decodeLines(t, lines); len(fromFile) != 8 || fromFile[0].Seq != got[0].Seq || fromFile[7].Outcome != trail.Error {
		t.Errorf("the audit file: %+v", fromFile)
	}
	table := trailRows(t, db)
	for _, secret := range []string{botToken, viewerToken, "SN-7731-SECRET", "Printer on fire"} {
		if strings.Contains(table, secret) || strings.Contains(lines, secret) {
			t.Errorf("the trail holds %q", secret)
		}
	}
	if !strings.Contains(table, "trail-test-client") {
		t.Errorf("trailRows read nothing useful:\n%s", table)
	}
}

// TestTrailWithoutAudit: with -audit=false the front records nothing.
func TestTrailWithoutAudit(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tickets.db")
	r := start(t, front.Run, newEnv(), "-listen", "127.0.0.1:0", "-metrics-listen", "", "-create-db", "-db", db, "-audit=false")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + r.addrs["mcp"] + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": "x", "title": "T"}}); err != nil || res.IsError {
		t.Fatalf("create: %v %v", err, res)
	}
	testwait.Holds(t, 300*time.Millisecond, "no entry", func() bool { return len(auditEntries(t, db)) == 0 })
}

// TestTrailRecordsOperatorActions: redrive and resolve, run as the
// operator commands, are recorded with who ran them (-operator, or the OS
// user), the request, its ticket and whether it was done.
func TestTrailRecordsOperatorActions(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-failed", "support", string(request.StatusFailed), 3, "permanent error (HTTP 422)", "")
	a.request(t, "req-uncertain", "alerts", string(request.StatusUncertain), 1, "attempt 1 ended without an answer", "")
	if _, err := a.admin(t, "redrive", "-operator", "alice", "req-failed"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.admin(t, "redrive", "-operator", "alice", "req-unknown"); err == nil {
		t.Fatal("a redrive of an unknown request succeeded")
	}
	if _, err := a.admin(t, "resolve", "req-uncertain", "-delivered", "EXT-9"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.admin(t, "status"); err != nil { // read-only: not recorded
		t.Fatal(err)
	}
	got := auditEntries(t, a.path)
	me := "os:"
	if u, err := user.Current(); err == nil {
		me += u.Username
	}
	want := []trail.Entry{
		{Subject: "alice", Action: "redrive", RequestID: "req-failed", Outcome: trail.Done, TicketID: ticket.IDFor("req-failed")},
		{Subject: "alice", Action: "redrive", RequestID: "req-unknown", Outcome: trail.Failed, TicketID: ticket.IDFor("req-unknown")},
		{Subject: me, Action: "resolve", RequestID: "req-uncertain", Outcome: trail.Done, TicketID: ticket.IDFor("req-uncertain"),
			Reason: "settled as delivered, external id EXT-9"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != trail.KindOperator || e.Subject != w.Subject || e.Action != w.Action || e.RequestID != w.RequestID ||
			e.Outcome != w.Outcome || e.TicketID != w.TicketID || (w.Reason != "" && e.Reason != w.Reason) {
			t.Errorf("entry %d: %+v\nwant %+v", i, e, w)
		}
	}
	if !strings.Contains(got[1].Reason, "no such request") {
		t.Errorf("the failed redrive's reason: %q", got[1].Reason)
	}
	// The table format names the action.
	out, err := a.admin(t, "audit", "-tool", "resolve")
	if err != nil || !strings.Contains(out, "operator: resolve") || !strings.Contains(out, "req-uncertain") || strings.Contains(out, "req-failed") {
		t.Errorf("audit -tool resolve: %v\n%s", err, out)
	}
}

// TestTrailRetention: the dispatcher removes the entries older than
// -audit-retention as it starts, and keeps the others.
func TestTrailRetention(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "tickets.db")
	ctx := context.Background()
	ldb, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer ldb.Close()
	store, err := trail.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now()
	for _, e := range []trail.Entry{
		{Time: now.Add(-31 * 24 * time.Hour), Kind: trail.KindCall, Subject: "old", Tool: "create_ticket", Outcome: trail.Accepted},
		{Time: now.Add(-29 * 24 * time.Hour), Kind: trail.KindCall, Subject: "kept", Tool: "create_ticket", Outcome: trail.Accepted},
	} {
		if err := store.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	start(t, dispatcher.Run, newEnv(), dispatcherArgs(dir, "-audit-retention", "720h")...)
	testwait.For(t, 10*time.Second, "the old entry removed", func() bool { return len(auditEntries(t, db)) == 1 })
	if got := auditEntries(t, db); got[0].Subject != "kept" {
		t.Errorf("retention kept %+v", got)
	}
	if _, _, err := runOnce(t, dispatcher.Run, newEnv(), dispatcherArgs(t.TempDir(), "-audit-retention", "10m")...); err == nil ||
		!strings.Contains(err.Error(), "-audit-retention") {
		t.Errorf("-audit-retention 10m: %v; want a usage error", err)
	}
}

// TestTrailOverStdio: a call over stdio is recorded too, under the
// anonymous subject, with the client's name and version; stdout carries
// JSON-RPC only.
func TestTrailOverStdio(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tickets.db")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr testio.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- front.Run(ctx, app.Env{Args: []string{"-stdio", "-create-db", "-db", db}, Stdin: inR, Stdout: outW, Stderr: &stderr,
			Lookup: newEnv().Lookup, Ready: func(map[string]string) {}})
		outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client", Version: "9"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"request_id": "s-1", "title": "T"}}); err != nil || res.IsError {
		t.Fatalf("create: %v %v", err, res)
	}
	cs.Close()
	inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("mcp-front -stdio: %v\n%s", err, stderr.String())
	}
	// Closing wrote what was queued: no wait.
	got := auditEntries(t, db)
	if len(got) != 1 || got[0].Subject != "" || got[0].RequestID != "s-1" || got[0].Outcome != trail.Accepted ||
		got[0].Client != "stdio-client" || got[0].ClientVersion != "9" || got[0].TicketID != ticket.IDFor("s-1") {
		t.Errorf("stdio trail: %+v", got)
	}
}
