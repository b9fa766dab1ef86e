package torture_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// Hostile inputs at the transport level, over HTTP and over stdio, against
// the real mcp-front binary. mcptools' own tests cover argument
// validation through a well-behaved client; these rows are what no client
// library would send: garbage, batches, deep nesting, unknown tools and
// methods, foreign origins, bad tokens. Each row names the exact answer.

const (
	aliceToken   = "alice-token-0123456789abcdef"
	malloryToken = "mallory-token-0123456789abcdef"
	protocol     = "2025-11-25"
)

// deep nests n arrays as the title of a create call.
func deep(id, n int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"deep-%d","title":%s%s}}}`,
		id, n, strings.Repeat("[", n), strings.Repeat("]", n))
}

func rpc(id int, method, params string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
}

func toolCall(id int, tool, args string) []byte {
	return rpc(id, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, tool, args))
}

// rpcError and rpcResult are JSON-RPC answers, for the expectations.
func rpcError(id any, code int, msg string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	return string(b)
}

func toolError(id int, text string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{
		"isError": true, "content": []any{map[string]any{"type": "text", "text": text}}}})
	return string(b)
}

var (
	batch        = []byte(`[{"jsonrpc":"2.0","id":30,"method":"tools/list"},{"jsonrpc":"2.0","id":31,"method":"ping"}]`)
	unknownTool  = toolCall(32, "delete_everything", `{}`)
	ctrlID       = toolCall(33, "create_ticket", `{"request_id":"a\u0001b","title":"t"}`)
	unknownMeth  = rpc(34, "tickets/drop", `{}`)
	paramsString = []byte(`{"jsonrpc":"2.0","id":35,"method":"tools/call","params":"create_ticket"}`)
	argsString   = toolCall(36, "create_ticket", `"request_id=x"`)
	wrongType    = toolCall(37, "create_ticket", `{"request_id":"x","title":12}`)
	badUTF8      = append(append([]byte(`{"jsonrpc":"2.0","id":38,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"u","title":"bad `), 0xff, 0xfe), `"}}}`...)
	hugeBody     = toolCall(39, "create_ticket", `{"request_id":"huge","title":"t","body":"`+strings.Repeat("x", 2<<20)+`"}`)
	bigField     = toolCall(40, "create_ticket", `{"request_id":"big","title":"t","body":"`+strings.Repeat("x", 100<<10)+`"}`)

	rloTitle     = toolCall(59, "create_ticket", `{"request_id":"rlo","title":"invoice \u202efdp.exe"}`)
	lriLabel     = toolCall(60, "create_ticket", `{"request_id":"lri","title":"t","labels":["ok","a\u2066b"]}`)
	tagTitle     = toolCall(61, "create_ticket", `{"request_id":"tag","title":"ok\udb40\udc69\udb40\udc67"}`)
	initParams   = fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"hostile","version":"0"}}`, protocol)
	msgRLOTitle  = `invalid argument "title": contains invisible format character U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 8: it changes how the text reads; remove it; nothing was written`
	msgLRILabel  = `invalid argument "labels[1]": contains invisible format character U+2066 (LEFT-TO-RIGHT ISOLATE) at byte 1: it changes how the text reads; remove it; nothing was written`
	msgTagTitle  = `invalid argument "title": contains tag character U+E0069 at byte 2 outside an emoji flag: tag characters are invisible and hide text; remove it; nothing was written`
	msgNoSession = "Invalid Request: no Mcp-Session-Id: a session starts with initialize, sent without one; every other message carries the Mcp-Session-Id of its answer"
	msgReinit    = `Invalid Request: duplicate "initialize" received: this session is initialized; a new session starts with initialize sent without Mcp-Session-Id`

	msgCtrlID     = `invalid argument "request_id": contains byte 0x01 at offset 1; only visible ASCII characters (no spaces) are allowed; nothing was written`
	msgParams     = `handling 'tools/call': invalid params: unmarshaling "\"create_ticket\"" into a *mcp.CallToolParamsRaw: json: cannot unmarshal "\"create_ticket\"" into Go value of type mcp.CallToolParamsRaw`
	msgArgsString = `invalid argument "arguments": must be a JSON object, got string; nothing was written`
	msgWrongType  = `invalid argument "title": must be of type string, got number; nothing was written`
	msgBadUTF8    = `invalid argument "title": is not valid UTF-8; nothing was written`
	msgBigField   = `invalid argument "body": is 102400 bytes long; at most 65536 are allowed; nothing was written`
)

// sameAnswer compares two answers as JSON values if both are JSON, else
// byte for byte.
func sameAnswer(got, want string) bool {
	var g, w any
	if json.Unmarshal([]byte(got), &g) == nil && json.Unmarshal([]byte(want), &w) == nil {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		return bytes.Equal(gb, wb)
	}
	return got == want
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

func countRequests(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM requests`).Scan(&n); err != nil {
		t.Fatalf("count ledger rows: %v", err)
	}
	return n
}
