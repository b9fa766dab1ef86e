package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lineClient speaks newline-delimited JSON-RPC to the server as bytes, so
// the test sees exactly what a client of each protocol version gets.
type lineClient struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Reader
	id  int
}

func (e *env) lineClient(t *testing.T) *lineClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ss, err := e.srv.Connect(context.Background(), &mcp.IOTransport{Reader: inR, Writer: outW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		inW.Close()
		ss.Close()
		outR.Close()
	})
	return &lineClient{t: t, in: inW, out: bufio.NewReader(outR)}
}

// modernMeta is the _meta of a request of protocol 2026-07-28.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}`

// call sends a request and returns its answer's result, or its error code.
func (c *lineClient) call(method, params string) (result map[string]json.RawMessage, code int) {
	c.t.Helper()
	c.id++
	if _, err := fmt.Fprintf(c.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", c.id, method, params); err != nil {
		c.t.Fatal(err)
	}
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		for {
			l, err := c.out.ReadString('\n')
			if err != nil || !strings.Contains(l, `"method"`) { // skip the server's notifications
				got <- answer{l, err}
				return
			}
		}
	}()
	var a answer
	select {
	case a = <-got:
	case <-time.After(20 * time.Second):
		c.t.Fatalf("%s: no answer", method)
	}
	var m struct {
		ID     int                        `json:"id"`
		Result map[string]json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if a.err != nil || json.Unmarshal([]byte(a.line), &m) != nil || m.ID != c.id {
		c.t.Fatalf("%s: answer %q (%v)", method, a.line, a.err)
	}
	if m.Error != nil {
		return nil, m.Error.Code
	}
	return m.Result, 0
}

func (c *lineClient) initialize(version string) map[string]json.RawMessage {
	c.t.Helper()
	res, code := c.call("initialize", `{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}`)
	if code != 0 {
		c.t.Fatalf("initialize %s: error %d", version, code)
	}
	if _, err := io.WriteString(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		c.t.Fatal(err)
	}
	return res
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Each protocol version gets what it defines, and what the server has:
// tools only (no prompts, resources, logging or completions, which every
// version answers as not found), tool fields and result fields only of
// that version, and the cache fields of list results only from 2026-07-28.
func TestAnswersPerProtocolVersion(t *testing.T) {
	e := newEnv(t)
	notServed := map[string]string{
		"prompts/list": `{}`, "resources/list": `{}`, "resources/templates/list": `{}`,
		"logging/setLevel": `{"level":"debug"}`, "completion/complete": `{"ref":{"type":"ref/prompt","name":"x"},"argument":{"name":"a","value":"b"}}`,
	}
	toolFields := map[string][]string{ // of the keyed create tool
		"2024-11-05": {"description", "inputSchema", "name"},
		"2025-03-26": {"annotations", "description", "inputSchema", "name"},
		"2025-06-18": {"annotations", "description", "inputSchema", "name", "outputSchema"},
		"2025-11-25": {"annotations", "description", "inputSchema", "name", "outputSchema"},
		"2026-07-28": {"annotations", "description", "inputSchema", "name", "outputSchema"},
	}
	for _, asked := range []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28", "2099-01-01"} {
		t.Run("initialize "+asked, func(t *testing.T) {
			c := e.lineClient(t)
			init := c.initialize(asked)
			// A version initialize does not negotiate is answered with the
			// newest one it does.
			want := asked
			if asked > "2025-11-25" {
				want = "2025-11-25"
			}
			if string(init["protocolVersion"]) != `"`+want+`"` || string(init["capabilities"]) != `{"tools":{}}` {
				t.Errorf("initialize: protocolVersion %s, capabilities %s; want %q and tools only", init["protocolVersion"], init["capabilities"], want)
			}
			if titled := strings.Contains(string(init["serverInfo"]), `"title"`); titled != (want >= "2025-06-18") {
				t.Errorf("initialize: serverInfo %s; a title only from 2025-06-18 on", init["serverInfo"])
			}
			list, code := c.call("tools/list", `{}`)
			if code != 0 {
				t.Fatalf("tools/list: error %d", code)
			}
			if got := keys(list); !slices.Equal(got, []string{"tools"}) {
				t.Errorf("tools/list result has %v; want only tools (no ttlMs, cacheScope before 2026-07-28)", got)
			}
			if fields := keyedToolFields(t, list); !slices.Equal(fields, toolFields[want]) {
				t.Errorf("%s on the wire has %v; want %v", keyedTool, fields, toolFields[want])
			}
			for method, params := range notServed {
				if _, code := c.call(method, params); code != -32601 {
					t.Errorf("%s: error %d, want -32601 (the server has no such feature)", method, code)
				}
			}
			res, code := c.call("tools/call", `{"name":"`+keyedTool+`","arguments":{"request_id":"`+newID()+`","title":"per version"}}`)
			if _, structured := res["structuredContent"]; code != 0 || structured != (want >= "2025-06-18") {
				t.Errorf("tools/call: error %d, result fields %v; structuredContent wanted from 2025-06-18 on", code, keys(res))
			}
		})
	}
	t.Run("2026-07-28", func(t *testing.T) {
		c := e.lineClient(t) // no initialize
		disc, code := c.call("server/discover", `{`+modernMeta+`}`)
		if code != 0 || string(disc["capabilities"]) != `{"tools":{}}` || !strings.Contains(string(disc["supportedVersions"]), "2026-07-28") {
			t.Errorf("server/discover: error %d, capabilities %s, versions %s; want tools only, 2026-07-28 among them", code, disc["capabilities"], disc["supportedVersions"])
		}
		list, code := c.call("tools/list", `{`+modernMeta+`}`)
		if code != 0 {
			t.Fatalf("tools/list: error %d", code)
		}
		for _, k := range []string{"ttlMs", "cacheScope", "resultType"} {
			if _, ok := list[k]; !ok {
				t.Errorf("tools/list result has %v; want %s in 2026-07-28", keys(list), k)
			}
		}
		if fields := keyedToolFields(t, list); !slices.Equal(fields, toolFields["2026-07-28"]) {
			t.Errorf("%s on the wire has %v; want %v", keyedTool, fields, toolFields["2026-07-28"])
		}
		for method, params := range notServed {
			if method == "logging/setLevel" {
				continue // removed by 2026-07-28: go-sdk answers it -32601 itself
			}
			modern := strings.Replace(params, "{", "{"+modernMeta+",", 1)
			if params == `{}` {
				modern = `{` + modernMeta + `}`
			}
			if _, code := c.call(method, modern); code != -32601 {
				t.Errorf("%s: error %d, want -32601", method, code)
			}
		}
	})
}

// keyedToolFields are the member names of the keyed create tool in a
// tools/list result.
func keyedToolFields(t *testing.T, list map[string]json.RawMessage) []string {
	t.Helper()
	var tools []map[string]json.RawMessage
	if err := json.Unmarshal(list["tools"], &tools); err != nil {
		t.Fatalf("tools: %v", err)
	}
	for _, tl := range tools {
		if string(tl["name"]) == `"`+keyedTool+`"` {
			return keys(tl)
		}
	}
	t.Fatalf("no %s in %s", keyedTool, list["tools"])
	return nil
}
