package mcpstdio

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"ticketrelay/front/rpcguard"
)

// RefuseWait bounds how long Refuse waits for a client's requests: Claude
// Code gives a stdio server 30 seconds to connect.
const RefuseWait = 30 * time.Second

// CodeCannotServe is the JSON-RPC error code of Refuse's answers: the
// specification's internal error, as the server cannot serve at all.
const CodeCannotServe = -32603

// Refuse answers the client of a server that cannot start (its ledger is
// missing, its configuration wrong): every request read from in is
// answered on out with a JSON-RPC error whose message is msg, which should
// say what is wrong and what to do. A client shows that message (Claude
// Code: "Failed to connect: <msg>") where a process that just exits is
// only a closed connection, its reason left in a log file the user never
// sees.
//
// It returns once it has answered initialize (a client that probed with
// server/discover first falls back to initialize, so the legacy handshake
// is the last request any client sends before giving up), when in ends,
// when ctx ends, or after wait: a process must not outlive a client that
// never writes. Notifications and answers need no reply and get none;
// out carries nothing but the answers.
func Refuse(ctx context.Context, in io.Reader, out io.Writer, msg string, wait time.Duration) error {
	requests := make(chan rpcguard.Message)
	done := make(chan struct{})
	defer close(done)
	// The read cannot be interrupted: once Refuse returns, the process
	// exits and takes the reader with it.
	go func() {
		defer close(requests)
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, tooLong, err := readLine(r)
			if info, bad := rpcguard.Check(line); bad == nil && !tooLong && info.Call {
				select {
				case requests <- info:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			return nil
		case req, ok := <-requests:
			if !ok {
				return nil
			}
			if err := writeRefusal(out, req.ID, msg); err != nil {
				return fmt.Errorf("stdio: answering %s: %w", req.Method, err)
			}
			if req.Method == rpcguard.MethodInitialize {
				return nil
			}
		}
	}
}

// writeRefusal writes the answer to the request id (one rpcguard.Check
// passed, so a valid one): error CodeCannotServe with msg.
func writeRefusal(out io.Writer, id json.RawMessage, msg string) error {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": CodeCannotServe, "message": msg}})
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}
