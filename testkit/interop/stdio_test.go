package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
)

// stdioCalls is how many tool calls the strict stdio test makes.
const stdioCalls = 1000

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// frontBinary returns $MCP_FRONT_BIN or builds cmd/mcp-front once.
func frontBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MCP_FRONT_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "interop-bin-"); buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "mcp-front")
		if b, err := exec.Command("go", "build", "-o", builtBin, "ticketrelay/cmd/mcp-front").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build mcp-front: %v\n%s", err, b)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// message is any JSON-RPC 2.0 message, decoded strictly enough to tell
// responses from requests and notifications.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// strictReader reads the server's stdout byte for byte: every line must be
// one complete JSON-RPC 2.0 message, with nothing before, between or after
// (no blank line, no log line, no partial line at EOF). Responses are handed
// out by id; anything else the server sends must be a well-formed request or
// notification.
type strictReader struct {
	mu        sync.Mutex
	waiters   map[string]chan message
	early     map[string]message
	violation []string
	lines     int
	bytes     int
	done      chan struct{}
}

func newStrictReader(r io.Reader) *strictReader {
	s := &strictReader{waiters: map[string]chan message{}, early: map[string]message{}, done: make(chan struct{})}
	go s.read(r)
	return s
}

func (s *strictReader) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violation) < 10 {
		s.violation = append(s.violation, fmt.Sprintf(format, args...))
	}
}

func (s *strictReader) read(r io.Reader) {
	defer close(s.done)
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		line, err := br.ReadBytes('\n')
		s.mu.Lock()
		s.bytes += len(line)
		s.mu.Unlock()
		if len(line) > 0 && !bytes.HasSuffix(line, []byte("\n")) {
			s.fail("stdout ended inside a line: %q", clip(line))
			return
		}
		if err != nil {
			return // EOF
		}
		body := line[:len(line)-1]
		if len(body) == 0 || body[0] != '{' || bytes.ContainsAny(body, "\r") || !json.Valid(body) {
			s.fail("stdout line %d is not a JSON-RPC message: %q", s.lines+1, clip(line))
			continue
		}
		var m message
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&m); err != nil || m.JSONRPC != "2.0" {
			s.fail("stdout line %d is not JSON-RPC 2.0: %q", s.lines+1, clip(line))
			continue
		}
		s.mu.Lock()
		s.lines++
		s.mu.Unlock()
		isResponse := len(m.ID) > 0 && m.Method == "" && (m.Result != nil || m.Error != nil)
		isRequest := m.Method != ""
		if !isResponse && !isRequest {
			s.fail("stdout line %d is neither a response nor a request/notification: %q", s.lines, clip(line))
			continue
		}
		if isResponse {
			id := string(m.ID)
			s.mu.Lock()
			if ch, ok := s.waiters[id]; ok {
				delete(s.waiters, id)
				ch <- m
			} else {
				s.early[id] = m
			}
			s.mu.Unlock()
		}
	}
}

func clip(b []byte) []byte {
	if len(b) > 300 {
		return append(b[:300:300], "..."...)
	}
	return b
}

// await registers for the response to id.
func (s *strictReader) await(id int) <-chan message {
	ch := make(chan message, 1)
	key := fmt.Sprint(id)
	s.mu.Lock()
	if m, ok := s.early[key]; ok {
		delete(s.early, key)
		ch <- m
	} else {
		s.waiters[key] = ch
	}
	s.mu.Unlock()
	return ch
}

type toolResult struct {
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	Content           []struct {
		Text string `json:"text"`
	} `json:"content"`
}

type createOut struct {
	RequestID string `json:"request_id"`
	TicketID  string `json:"ticket_id"`
	Status    string `json:"status"`
	Replayed  bool   `json:"replayed"`
}

// TestStdioStrict makes 1,000 calls over stdio with the most verbose logging
// and fails on any byte of stdout that is not part of a JSON-RPC message.
func TestStdioStrict(t *testing.T) {
	bin := frontBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-stdio", "-create-db", "-db", filepath.Join(dir, "tickets.db"), "-log-level", "debug")
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Env = append(os.Environ(), "TICKETRELAY_METRICS_LISTEN=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rd := newStrictReader(stdout)

	var wmu sync.Mutex
	send := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Error(err)
			return
		}
		wmu.Lock()
		defer wmu.Unlock()
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Errorf("write stdin: %v", err)
		}
	}
	// call sends a request and waits for its answer. It runs on worker
	// goroutines too, so it reports a missing answer with t.Errorf (t.Fatal
	// must not be called off the test's goroutine) and returns false.
	call := func(id int, method string, params any) (message, bool) {
		ch := rd.await(id)
		send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		select {
		case m := <-ch:
			return m, true
		case <-time.After(30 * time.Second):
			rd.mu.Lock()
			violations := append([]string(nil), rd.violation...)
			rd.mu.Unlock()
			t.Errorf("no answer to %s id %d in 30 s; violations %v", method, id, violations)
			return message{}, false
		}
	}

	init, ok := call(0, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "strict-stdio", "version": "0"}})
	if !ok {
		t.FailNow()
	}
	if init.Error != nil {
		t.Fatalf("initialize: %s", init.Error)
	}
	send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized", "params": map[string]any{}})
	// The server logs nothing to the client: it does not advertise logging,
	// and a client that asks for it anyway is told it is not there.
	m, ok := call(1, "logging/setLevel", map[string]any{"level": "debug"})
	if !ok {
		t.FailNow()
	}
	var notFound struct{ Code int }
	if json.Unmarshal(m.Error, &notFound) != nil || notFound.Code != -32601 || bytes.Contains(init.Result, []byte(`"logging"`)) {
		t.Fatalf("logging/setLevel: %s, %s; want -32601, and no logging capability in %s", m.Result, m.Error, init.Result)
	}

	// Calls run 8 at a time: creates, replays of earlier creates, status
	// reads, invalid arguments, tools/list and ping.
	type want struct {
		kind string
		id   string // request_id
	}
	var (
		mu      sync.Mutex
		args    = map[string]map[string]any{}
		created []string
		tickets = map[string]string{}
		counts  = map[string]int{}
	)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range stdioCalls {
		id := 100 + i
		var (
			method string
			params any
			w      want
		)
		mu.Lock()
		switch {
		case i%10 == 3:
			method, params, w = "tools/list", map[string]any{}, want{kind: "list"}
		case i%10 == 7 && len(created) > 0:
			rid := created[i%len(created)]
			method, w = "tools/call", want{kind: "find", id: rid}
			params = map[string]any{"name": "find_request", "arguments": map[string]any{"request_id": rid}}
		case i%10 == 5 && len(created) > 0:
			rid := created[(i*7)%len(created)]
			method, w = "tools/call", want{kind: "replay", id: rid}
			params = map[string]any{"name": "create_ticket", "arguments": args[rid]}
		case i%50 == 9:
			method, w = "tools/call", want{kind: "invalid"}
			params = map[string]any{"name": "create_ticket", "arguments": map[string]any{"request_id": "has space", "title": ""}}
		case i%50 == 19:
			method, params, w = "ping", map[string]any{}, want{kind: "ping"}
		default:
			rid := fmt.Sprintf("stdio-%04d-%d", i, start.UnixNano())
			method, w = "tools/call", want{kind: "create", id: rid}
			args[rid] = map[string]any{"request_id": rid, "title": "strict stdio " + rid,
				"body": "line one\nline two \u2028 with a separator", "labels": []string{"stdio", "strict"}}
			params = map[string]any{"name": "create_ticket", "arguments": args[rid]}
		}
		mu.Unlock()
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, ok := call(id, method, params)
			if !ok {
				return
			}
			if m.Error != nil {
				t.Errorf("call %d (%s): JSON-RPC error %s", id, w.kind, m.Error)
				return
			}
			var res toolResult
			if method == "tools/call" {
				if err := json.Unmarshal(m.Result, &res); err != nil {
					t.Errorf("call %d: result %s: %v", id, m.Result, err)
					return
				}
			}
			var out createOut
			if len(res.StructuredContent) > 0 {
				json.Unmarshal(res.StructuredContent, &out)
			}
			mu.Lock()
			defer mu.Unlock()
			counts[w.kind]++
			switch w.kind {
			case "create":
				if res.IsError || out.Replayed || out.Status != "queued" || out.TicketID == "" {
					t.Errorf("create %s: %s", w.id, m.Result)
					return
				}
				created = append(created, w.id)
				tickets[w.id] = out.TicketID
			case "replay":
				if res.IsError || !out.Replayed || out.TicketID != tickets[w.id] {
					t.Errorf("replay of %s: %s (first ticket %s)", w.id, m.Result, tickets[w.id])
				}
			case "find":
				if res.IsError || out.Status != "queued" || out.TicketID != tickets[w.id] {
					t.Errorf("find_request %s: %s", w.id, m.Result)
				}
			case "invalid":
				if !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "nothing was written") {
					t.Errorf("invalid create: %s", m.Result)
				}
			case "list":
				if !bytes.Contains(m.Result, []byte(`"create_ticket"`)) || !bytes.Contains(m.Result, []byte(`"find_request"`)) {
					t.Errorf("tools/list: %s", clip(m.Result))
				}
			}
		}()
		// Creates must be answered before replays and reads can use them:
		// the first few calls go one by one.
		if i < 8 {
			wg.Wait()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)

	stdin.Close()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("mcp-front exited with %v after stdin closed; stderr tail:\n%s", err, tail(stderr.String(), 2000))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("mcp-front still running 20 s after stdin closed")
	}
	<-rd.done

	rd.mu.Lock()
	defer rd.mu.Unlock()
	for _, v := range rd.violation {
		t.Errorf("stdout violation: %s", v)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != stdioCalls {
		t.Errorf("%d of %d calls answered: %v", total, stdioCalls, counts)
	}
	if len(rd.waiters) != 0 || len(rd.early) != 0 {
		t.Errorf("%d calls unanswered, %d answers nobody asked for", len(rd.waiters), len(rd.early))
	}
	debugLines := strings.Count(stderr.String(), "level=DEBUG")
	if debugLines == 0 {
		t.Errorf("no level=DEBUG line on stderr: the test did not run at the most verbose logging")
	}
	t.Logf("%d calls in %v (%v); stdout %d JSON-RPC lines, %d bytes, 0 stray; stderr %d bytes, %d debug lines",
		total, elapsed.Round(time.Millisecond), counts, rd.lines, rd.bytes, stderr.Len(), debugLines)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
