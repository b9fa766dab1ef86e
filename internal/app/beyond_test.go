package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine/redminetest"
	"ticketrelay/delivery/downstream/slack/slacktest"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/testwait"
)

// TestCommentsAndUpdates: add_comment and update_ticket through the real
// front over HTTP, the ledger, NATS and the forwarder, to a Redmine fake
// (no key, a consistent lookup of journals) and a Slack fake (thread
// replies, looked up eventually).
//
//   - a comment sent twice with one request_id is accepted once and
//     replayed; with other arguments it is idempotency_key_conflict;
//   - a comment and an update accepted while the ticket's create has not
//     reached Redmine (its first call fails) wait for it and land once on
//     the issue it made;
//   - the comment's answer is lost after Redmine wrote it: the marker's
//     lookup settles it delivered, with one note;
//   - an update applied twice (two request ids) leaves the issue as once;
//   - find_request lists the ticket's comments and updates;
//   - on Slack a lost answer is uncertain, never resent;
//   - a read-only caller is not shown the tools and is refused them, and a
//     caller granted only Slack's tool may not comment on Redmine.
func TestCommentsAndUpdates(t *testing.T) {
	rm := redminetest.New(t, "rm-key", "ops", 0)
	sl := slacktest.New(t)
	listen := freePort(t)
	resource := "http://" + listen + "/mcp"
	const (
		writerToken = "writer-0123456789abcdef0123456789"
		viewerToken = "viewer-0123456789abcdef0123456789"
		chatToken   = "chat-0123456789abcdef01234567890"
	)
	cfg := writeFile(t, "ticketrelay.yaml", `
targets:
  - {name: rm, kind: redmine, endpoint: '`+rm.URL()+`', options: {api_key_env: RM_KEY, project: ops}}
  - {name: chat, kind: slack, options: {webhook_url_env: SL_HOOK, bot_token_env: SL_BOT, channel: `+slacktest.Channel+`, api_endpoint: '`+sl.APIURL()+`'}}
tools:
  - {name: file_issue, target: rm}
  - {name: post_chat, target: chat}
grants:
  - {subject: writer, tools: all}
  - {subject: viewer, tools: read-only}
  - {subject: chatter, tools: [post_chat, find_request]}
`)
	dir := t.TempDir()
	env := newEnv("TICKETRELAY_AUTH_TOKENS", "writer:"+writerToken+",viewer:"+viewerToken+",chatter:"+chatToken,
		"RM_KEY", "rm-key", "SL_HOOK", sl.URL(), "SL_BOT", slacktest.BotToken)
	start(t, front.Run, env, "-listen", listen, "-metrics-listen", "", "-config", cfg, "-create-db", "-db", filepath.Join(dir, "tickets.db"))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sessions := map[string]*mcp.ClientSession{}
	session := func(token string) *mcp.ClientSession {
		if cs := sessions[token]; cs != nil {
			return cs
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "beyond-test", Version: "0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: resource, HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		sessions[token] = cs
		return cs
	}
	// raw calls tool as the caller of token: its answer's text, and whether
	// it is a tool error.
	raw := func(token, tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := session(token).CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	call := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		text, isErr := raw(writerToken, tool, args)
		if isErr {
			t.Fatalf("%s %v: %s", tool, args, text)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	status := func(id string) string {
		return call("find_request", map[string]any{"request_id": id})["status"].(string)
	}

	// Accepted before any dispatcher runs; the create's first call fails.
	rm.Faults.Next(downstreamtest.ServerError)
	created := call("file_issue", map[string]any{"request_id": "c-1", "title": "Checkout returns 500"})
	comment := map[string]any{"request_id": "m-1", "ticket": "c-1", "body": "Seen again on run 42."}
	first := call("add_comment", comment)
	if first["ticket_id"] != created["ticket_id"] || first["replayed"] != false {
		t.Fatalf("add_comment answered %v; want the ticket %v, not replayed", first, created["ticket_id"])
	}
	if again := call("add_comment", comment); again["replayed"] != true {
		t.Fatalf("the same comment again: %v; want replayed", again)
	}
	if text, isErr := raw(writerToken, "add_comment", map[string]any{"request_id": "m-1", "ticket": "c-1", "body": "Other words."}); !isErr ||
		!strings.HasPrefix(text, "idempotency_key_conflict") {
		t.Fatalf("m-1 with another body: %v %s; want idempotency_key_conflict", isErr, text)
	}
	if text, isErr := raw(writerToken, "update_ticket", map[string]any{"request_id": "u-x", "ticket": "c-1", "labels": []string{"a"}}); !isErr ||
		!strings.Contains(text, "cannot set labels") {
		t.Fatalf("labels on Redmine: %v %s; want refused, naming the field", isErr, text)
	}

	// The comment's call is written by Redmine, its answer lost.
	rm.Notes.Next(downstreamtest.LoseResponse)
	disp := start(t, dispatcher.Run, env, dispatcherArgs(dir, "-config", cfg, "-retry-base", "100ms", "-retry-max", "500ms")...)
	for _, id := range []string{"c-1", "m-1"} {
		var st string
		settled := func() bool { st = status(id); return st == "delivered" || st == "failed" || st == "uncertain" }
		if !testwait.Until(60*time.Second, settled) || st != "delivered" {
			t.Fatalf("%s: %v\ndispatcher:\n%s", id, call("find_request", map[string]any{"request_id": id}), disp.stderr)
		}
	}
	update := map[string]any{"request_id": "u-1", "ticket": created["ticket_id"], "status": "closed"}
	call("update_ticket", update)
	testwait.For(t, 30*time.Second, "u-1 delivered", func() bool { return status("u-1") == "delivered" })
	if again := call("update_ticket", update); again["replayed"] != true || again["status"] != "delivered" {
		t.Fatalf("the same update again: %v; want replayed, delivered", again)
	}
	issues := rm.Issues()
	if len(issues) != 1 {
		t.Fatalf("Redmine has %d issues, want 1", len(issues))
	}
	id := issues[0].ID
	if notes := rm.NotesOf(int64(id)); len(notes) != 1 || !strings.HasPrefix(notes[0], "Seen again on run 42.") {
		t.Fatalf("the issue's notes %q: want the comment once", notes)
	}
	if is, _ := rm.Issue(int64(id)); !is.Closed {
		t.Fatalf("issue %+v: want closed", is)
	}
	// Set to closed again under a new request id: nothing more changes.
	call("update_ticket", map[string]any{"request_id": "u-2", "ticket": "c-1", "status": "closed"})
	testwait.For(t, 30*time.Second, "u-2 delivered", func() bool { return status("u-2") == "delivered" })
	if is, _ := rm.Issue(int64(id)); !is.Closed || len(rm.NotesOf(int64(id))) != 1 {
		t.Fatalf("after the second update: %+v, notes %q", is, rm.NotesOf(int64(id)))
	}
	// A foreign ticket of Redmine's own, by its number.
	other := rm.AddIssue("Filed by hand")
	call("add_comment", map[string]any{"request_id": "m-2", "ticket": strconv.FormatInt(other, 10), "target": "rm", "body": "Related."})
	testwait.For(t, 30*time.Second, "m-2 delivered", func() bool { return status("m-2") == "delivered" })
	if notes := rm.NotesOf(other); len(notes) != 1 {
		t.Fatalf("the hand-filed issue's notes %q: want one", notes)
	}

	found := call("find_request", map[string]any{"request_id": "c-1"})
	b, _ := json.Marshal([]any{found["comments"], found["updates"]})
	if want := `[[{"request_id":"m-1","status":"delivered"}],[{"request_id":"u-1","status":"delivered"},{"request_id":"u-2","status":"delivered"}]]`; string(b) != want {
		t.Errorf("find_request c-1 lists %s, want %s", b, want)
	}
	if m := call("find_request", map[string]any{"request_id": "m-1"}); m["kind"] != "comment" || m["ticket"] != created["ticket_id"] {
		t.Errorf("find_request m-1: %v; want kind comment on %v", m, created["ticket_id"])
	}

	// Slack: a reply whose answer is lost cannot be proven either way.
	ts := sl.AddParent("deploy failed")
	sl.ReplyFaults.Next(downstreamtest.LoseResponse)
	call("add_comment", map[string]any{"request_id": "s-1", "ticket": ts, "target": "chat", "body": "Rolled back."})
	testwait.For(t, 30*time.Second, "s-1 settled", func() bool { return status("s-1") == "uncertain" })
	if n := len(sl.Replies(ts)); n != 1 {
		t.Errorf("the thread has %d replies, want the one the lost call wrote", n)
	}

	// Who may.
	if text, isErr := raw(viewerToken, "add_comment", map[string]any{"request_id": "v-1", "ticket": ts, "target": "chat", "body": "x"}); !isErr ||
		!strings.Contains(text, "not granted") {
		t.Errorf("a read-only caller's add_comment: %v %s; want refused", isErr, text)
	}
	res, err := session(viewerToken).ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == "add_comment" || tl.Name == "update_ticket" {
			t.Errorf("a read-only caller is shown %s", tl.Name)
		}
	}
	if text, isErr := raw(chatToken, "add_comment", map[string]any{"request_id": "h-1", "ticket": strconv.FormatInt(other, 10), "target": "rm", "body": "x"}); !isErr ||
		!strings.Contains(text, "needs a grant of a create tool of that target") {
		t.Errorf("a Slack-only caller's comment on Redmine: %v %s; want refused", isErr, text)
	}
	if text, isErr := raw(chatToken, "find_request", map[string]any{"request_id": "h-1"}); isErr || !strings.Contains(text, `"unknown"`) {
		t.Errorf("the refused comment was stored: %s", text)
	}
}
