package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// Claude Code's first line over stdio (2.1.332, as logged on the pipe): a
// server/discover probe at 2026-07-28.
const claudeDiscover = `{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{` +
	`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","title":"Claude Code","version":"2.1.332"},` +
	`"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}}}}`

// Claude Code's initialize, its fallback when the probe gets an error that
// is not a 2026-07-28 one.
const claudeInitialize = `{"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}},` +
	`"clientInfo":{"name":"claude-code","version":"2.1.332"}},"jsonrpc":"2.0","id":0}`

// stdioChild is mcp-front -stdio as a child process, with its stdout read
// line by line.
type stdioChild struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line; closed at EOF
	stderr bytes.Buffer
}

func startStdio(t *testing.T, args ...string) *stdioChild {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := &stdioChild{t: t, lines: make(chan string, 16)}
	c.cmd = exec.CommandContext(ctx, frontBinary(t), append([]string{"-stdio"}, args...)...)
	c.cmd.SysProcAttr = e2eproc.DieWithParent()
	c.cmd.Env = append(os.Environ(), "TICKETRELAY_METRICS_LISTEN=")
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cmd.Process.Kill(); c.cmd.Wait() })
	go func() {
		defer close(c.lines)
		r := bufio.NewReader(stdout)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				c.lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

// ask writes line and returns the next line of stdout, which must be one
// JSON-RPC answer.
func (c *stdioChild) ask(line string) (id string, result map[string]json.RawMessage, code int, message string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("write %s: %v", line, err)
	}
	var l string
	select {
	case got, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("stdout ended before the answer to %s; stderr:\n%s", line, c.stderr.String())
		}
		l = got
	case <-time.After(30 * time.Second):
		c.t.Fatalf("no answer to %s in 30 s", line)
	}
	var m struct {
		JSONRPC string                     `json:"jsonrpc"`
		ID      json.RawMessage            `json:"id"`
		Result  map[string]json.RawMessage `json:"result"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(l), &m); err != nil || m.JSONRPC != "2.0" || !strings.HasSuffix(l, "}\n") {
		c.t.Fatalf("stdout line %q is not one JSON-RPC message", l)
	}
	if m.Error != nil {
		return string(m.ID), nil, m.Error.Code, m.Error.Message
	}
	return string(m.ID), m.Result, 0, ""
}

// Over stdio, Claude Code's probe is answered as over HTTP: mcp-front
// speaks 2026-07-28 there too, without initialize, with tools only.
func TestStdioServesTheModernProtocol(t *testing.T) {
	c := startStdio(t, "-create-db", "-db", filepath.Join(t.TempDir(), "tickets.db"))
	id, disc, code, msg := c.ask(claudeDiscover)
	if id != `"server-discover-probe-1"` || code != 0 {
		t.Fatalf("server/discover: id %s, error %d %q; want its result", id, code, msg)
	}
	if !strings.Contains(string(disc["supportedVersions"]), `"2026-07-28"`) || string(disc["capabilities"]) != `{"tools":{}}` {
		t.Errorf("server/discover: versions %s, capabilities %s; want 2026-07-28 and tools only", disc["supportedVersions"], disc["capabilities"])
	}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","version":"2.1.332"},` +
		`"io.modelcontextprotocol/clientCapabilities":{}}`
	_, list, code, msg := c.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`)
	if code != 0 || !bytes.Contains(list["tools"], []byte(`"create_ticket"`)) || list["ttlMs"] == nil {
		t.Errorf("tools/list at 2026-07-28: error %d %q, result %v", code, msg, list)
	}
	_, res, code, msg := c.ask(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_ticket",` +
		`"arguments":{"request_id":"stdio-modern-1","title":"stdio speaks 2026-07-28"},` + meta + `}}`)
	if code != 0 || !bytes.Contains(res["structuredContent"], []byte(`"status":"queued"`)) {
		t.Errorf("tools/call at 2026-07-28: error %d %q, result %v", code, msg, res)
	}
}

// A server that cannot start tells its stdio client why, in the answer to
// its first requests, then exits as it always did: Claude Code shows that
// answer instead of a closed connection. Stdout carries nothing else.
func TestStdioStartFailureTellsTheClient(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothere", "tickets.db")
	c := startStdio(t, "-db", missing)
	for _, line := range []string{claudeDiscover, claudeInitialize} {
		_, _, code, msg := c.ask(line)
		if code != -32603 || !strings.Contains(msg, "-db "+missing+": no ledger there") || !strings.Contains(msg, "-create-db") {
			t.Errorf("answer to %.40s…: %d %q; want -32603 saying what is wrong (no ledger at -db) and what to do (-create-db)", line, code, msg)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("exit: %v; want status 2 (a usage error)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mcp-front still running 30 s after answering initialize")
	}
	for l := range c.lines {
		t.Errorf("stdout carried more than the two answers: %q", l)
	}
	if got := strings.TrimSpace(c.stderr.String()); strings.Count(got, "\n") != 0 || !strings.Contains(got, "no ledger there") {
		t.Errorf("stderr: %q; want the one line saying why", got)
	}
}
