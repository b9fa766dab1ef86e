// Package mcpstdio guards go-sdk's stdio transport: it passes on, line by
// line, only what rpcguard accepts, answers the rest itself, and holds the
// end of the client's input back until the calls it passed on are answered.
// A server that cannot start answers its client with the reason instead
// (Refuse).
package mcpstdio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"ticketrelay/front/rpcguard"
	"ticketrelay/internal/jsonscan"
)

// MaxLine is the longest line passed to the server (the SDK's own default
// frame limit is of the same order); a longer one is answered with an error
// and skipped.
const MaxLine = 8 << 20

// DrainTimeout bounds how long the guard holds back the end of the client's
// input while calls it passed on are still unanswered: the longest a create
// tool may wait for delivery (mcptools.MaxWaitForDelivery, 45 seconds) plus
// 15 seconds for the ledger write and the answer. It is spelled out rather
// than derived so that the transport does not import the tools (and through
// them the ledger); TestDrainTimeoutCoversTheLongestWait keeps the two in
// step.
const DrainTimeout = 60 * time.Second

// Guard sits between a client's byte stream and the SDK's stdio
// transport, which decodes a stream of JSON values and ends the session on
// the first one it cannot read. The guard reads lines instead: a line that
// is one JSON-RPC 2.0 object goes on to the server; anything else (not
// JSON, a batch, another version tag, nesting deeper than rpcguard.MaxJSONDepth, a
// line longer than MaxLine) is answered with the JSON-RPC error the
// specification asks for, and the session goes on. Blank lines are skipped.
//
// Both eras of the protocol are served on one stream, as over HTTP: a
// request that names protocol rpcguard.ModernProtocol or later in its _meta, and
// server/discover, go to the server whenever they come; any other call but
// ping before initialize is answered -32600 (go-sdk would answer code 0).
//
// When the client's input ends, the guard holds the end back until every
// request it passed on has been answered on out, for at most
// DrainTimeout: the SDK ends the session on the end of its input and
// drops every call not yet answered, while a scripted client (a shell pipe)
// closes its end right after its last request and still expects the answer.
// It gives up early if a write to out fails or the transport closes the
// reader.
//
// It returns the reader to give the transport and the writer the transport
// must write through: the guard's own answers share its lock, so a line on
// out is never interleaved with another.
func Guard(in io.Reader, out io.Writer, log *slog.Logger) (io.ReadCloser, io.WriteCloser) {
	return guard(in, out, log, DrainTimeout)
}

func guard(in io.Reader, out io.Writer, log *slog.Logger, drain time.Duration) (io.ReadCloser, io.WriteCloser) {
	pr, pw := io.Pipe()
	r := &guardReader{PipeReader: pr, closed: make(chan struct{})}
	w := &lockedWriter{w: out, pending: map[string]bool{}}
	go func() {
		err := guardLines(in, pw, w, log)
		if left, waited := w.awaitAnswers(drain, r.closed); left > 0 {
			log.Warn("stdio: input ended; gave up waiting for the answers to calls still running",
				"unanswered", left, "waited", waited.Round(time.Millisecond))
		} else if waited > 0 {
			log.Debug("stdio: input ended; every call answered", "waited", waited.Round(time.Millisecond))
		}
		pw.CloseWithError(err) // nil: EOF for the transport
	}()
	return r, w
}

// guardReader is the transport's end of the pipe; closing it (the session
// ended) stops the wait for answers.
type guardReader struct {
	*io.PipeReader
	once   sync.Once
	closed chan struct{}
}

func (r *guardReader) Close() error {
	r.once.Do(func() { close(r.closed) })
	return r.PipeReader.Close()
}

func guardLines(in io.Reader, next io.Writer, out *lockedWriter, log *slog.Logger) error {
	r := bufio.NewReaderSize(in, 64<<10)
	initialized := false // an initialize request went on to the server
	for {
		line, tooLong, err := readLine(r)
		if len(line) > 0 || tooLong {
			info, msg := rpcguard.Check(line)
			switch {
			case tooLong:
				msg = &rpcguard.Error{Code: rpcguard.CodeInvalidRequest, Reason: fmt.Sprintf("message longer than %d bytes", MaxLine)}
			case msg != nil:
			case info.Method == rpcguard.MethodInitialize:
				initialized = true
			case !initialized && info.Call && info.Method != "ping" && info.Method != MethodDiscover && !modernRequest(line):
				// go-sdk answers it with code 0, which is no JSON-RPC code.
				// 2026-07-28 and later have no initialize: each request
				// carries its version in _meta, and the server answers it on
				// its own, as over HTTP. A server/discover without it is a
				// dual-era client's probe; the server's -32601 to it tells
				// the client to fall back to initialize.
				msg = &rpcguard.Error{ID: info.ID, Code: rpcguard.CodeInvalidRequest,
					Reason: fmt.Sprintf("%q before initialize: a session starts with initialize", info.Method)}
			}
			if msg != nil {
				log.Warn("stdio: answered a malformed line", "code", msg.Code, "reason", msg.Reason)
				if werr := out.writeError(msg); werr != nil {
					return werr
				}
			} else {
				// Tracked before the server can see it, so that its answer
				// cannot come first.
				out.track(line)
				if _, werr := next.Write(append(line, '\n')); werr != nil {
					return werr
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// MethodDiscover is the probe a client of 2026-07-28 or later sends first
// (SEP-2575).
const MethodDiscover = "server/discover"

// modernRequest reports whether line, a JSON-RPC request, names a protocol
// version of rpcguard.ModernProtocol or later in params._meta, as go-sdk decides it
// (a later version it does not serve it answers with the versions it does).
func modernRequest(line []byte) bool {
	version := ""
	member(line, "params", func(params []byte) {
		member(params, "_meta", func(meta []byte) {
			member(meta, "io.modelcontextprotocol/protocolVersion", func(v []byte) {
				version = jsonscan.DecodeString(v)
			})
		})
	})
	return version >= rpcguard.ModernProtocol
}

// member calls fn with the value of the first member of object b named
// name, if there is one.
func member(b []byte, name string, fn func(value []byte)) {
	jsonscan.Members(b, func(n string, v []byte) bool {
		if n == name {
			fn(v)
			return false
		}
		return true
	})
}

// readLine reads one line without its end, trimmed of surrounding blanks.
// A line over MaxLine is consumed and reported as tooLong.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > MaxLine+1 {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(buf), tooLong, err
	}
}
