package mcpstdio

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"

	"ticketrelay/front/rpcguard"
	"ticketrelay/internal/jsonscan"
)

// lockedWriter serialises whole writes: the SDK writes one message, newline
// included, per Write. It also keeps the ids of the requests the guard
// passed to the server that have no answer on w yet.
type lockedWriter struct {
	mu      sync.Mutex
	w       io.Writer
	pending map[string]bool // idKey of each request passed on and not yet answered
	failed  bool            // a write to w failed: no answer can arrive any more
	settled chan struct{}   // closed when pending empties or a write fails, while awaitAnswers waits
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(validCodes(p))
	if n > 0 {
		n = len(p) // what the caller wrote, whatever validCodes changed
	}
	if err != nil {
		l.failed = true
	} else if len(l.pending) > 0 {
		for line := range bytes.SplitSeq(p, []byte("\n")) {
			if key, ok := messageID(line, false); ok {
				delete(l.pending, key)
			}
		}
	}
	if l.settled != nil && (l.failed || len(l.pending) == 0) {
		close(l.settled)
		l.settled = nil
	}
	return n, err
}

func (l *lockedWriter) Close() error { return nil }

// validCodes gives every error answer in p (lines of JSON-RPC messages)
// that carries code 0 the code -32600 instead. go-sdk answers an error it
// did not classify with code 0, which JSON-RPC does not define: a call
// after an initialize that failed, a second initialize, initialize
// params it cannot read, a cursor it cannot decode; each is a request the
// server refuses as it stands, which is what -32600 says.
func validCodes(p []byte) []byte {
	if !bytes.Contains(p, []byte(`"code":0`)) {
		return p
	}
	var out []byte
	for line := range bytes.Lines(p) {
		out = append(out, fixCode0(line)...)
	}
	return out
}

// fixCode0 rewrites one message line whose error has code 0.
func fixCode0(line []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil || m["error"] == nil {
		return line
	}
	var e map[string]json.RawMessage
	if json.Unmarshal(m["error"], &e) != nil || string(e["code"]) != "0" {
		return line
	}
	e["code"] = json.RawMessage(strconv.Itoa(rpcguard.CodeInvalidRequest))
	m["error"], _ = json.Marshal(e)
	b, err := json.Marshal(m)
	if err != nil {
		return line
	}
	if bytes.HasSuffix(line, []byte("\n")) {
		b = append(b, '\n')
	}
	return b
}

// track records the id of line, a message passed to the server, if it is
// a request: a call that needs an answer. A notification needs none; an
// id given again while the first is unanswered is the same entry (the
// server refuses the second with an answer to null).
func (l *lockedWriter) track(line []byte) {
	if key, ok := messageID(line, true); ok {
		l.mu.Lock()
		l.pending[key] = true
		l.mu.Unlock()
	}
}

// unanswered is the number of requests passed on and not yet answered.
func (l *lockedWriter) unanswered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// awaitAnswers waits until every tracked request has been answered, a write
// fails, stop is closed or timeout passes. It returns how many requests are
// still unanswered, and how long it waited (0 if it did not).
func (l *lockedWriter) awaitAnswers(timeout time.Duration, stop <-chan struct{}) (left int, waited time.Duration) {
	l.mu.Lock()
	if l.failed || len(l.pending) == 0 {
		l.mu.Unlock()
		return 0, 0
	}
	settled := make(chan struct{})
	l.settled = settled
	l.mu.Unlock()

	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-settled:
	case <-stop:
	case <-timer.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled = nil
	if l.failed {
		return 0, time.Since(start)
	}
	return len(l.pending), time.Since(start)
}

// messageID returns the key of the id of line, a JSON-RPC message, if it is
// a request (request true: it has a method) or an answer (request false: no
// method, a result or an error). Two ids get the same key if they are the
// same JSON-RPC id however they are spelled: go-sdk answers with the id it
// decoded, not the bytes it read.
func messageID(line []byte, request bool) (key string, ok bool) {
	var id []byte
	hasMethod, hasAnswer := false, false
	jsonscan.Members(line, func(name string, v []byte) bool {
		switch name {
		case "id":
			id = v
		case "method":
			hasMethod = true
		case "result", "error":
			hasAnswer = true
		}
		return true
	})
	if id == nil || (request && !hasMethod) || (!request && (hasMethod || !hasAnswer)) {
		return "", false
	}
	return idKey(id)
}

// idKey is the canonical form of a JSON-RPC id: a string or an integer.
func idKey(raw []byte) (string, bool) {
	if len(raw) > 0 && raw[0] == '"' {
		return "s" + jsonscan.DecodeString(raw), true
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return "n" + strconv.FormatInt(n, 10), true
	}
	return "", false
}

func (l *lockedWriter) writeError(e *rpcguard.Error) error {
	_, err := l.Write(append(e.Encode(), '\n'))
	return err
}
