package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/testkit/e2eproc"
)

// mcp-front -stdio under a real MCP client: stdout carries JSON-RPC and
// nothing else (the go-sdk client drops the session on one stray line), even
// with debug logging and concurrent calls.
//
// The command run by mcp.CommandTransport is this test binary in tap mode
// (see runTap): it runs mcp-front with the same stdin and stderr, forwards
// its stdout unchanged, checks every line of it, and exits non-zero if one is
// not a JSON-RPC 2.0 message, so a stray byte fails the test even where the
// client might not notice it.
func TestStdioCarriesOnlyJSONRPC(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "tickets.db")
	logPath := filepath.Join(dir, "mcp-front-stdio.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	t.Cleanup(func() {
		if t.Failed() {
			e2eproc.DumpLog(t, "mcp-front -stdio", logPath)
		}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-stdio", "-create-db", "-db", db, "-log-level", "debug")
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Env = e2eproc.Environ(tapEnv + "=" + frontBin)
	cmd.Stderr = logf

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "ticketrelay-e2e-stdio", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect over stdio: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			cs.Close()
		}
	})

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
	}
	if !names[createTool] || !names["find_request"] {
		t.Fatalf("tools/list: %v, want create_ticket and find_request", names)
	}

	// 4 clients at once on the one session, so that answers race for stdout.
	const workers, perWorker = 4, 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, a...))
	}
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := fmt.Sprintf("stdio-w%d-%03d", w, i)
				r, err := create(ctx, cs, ticketArgs(id, "Ticket over stdio "+id))
				if err != nil {
					fail("create_ticket %s: %v", id, err)
					return
				}
				if r.Replayed {
					fail("create_ticket %s: replayed on the first call", id)
				}
				st, err := find(ctx, cs, id)
				if err != nil {
					fail("find_request %s: %v", id, err)
					return
				}
				// No dispatcher runs: the request stays in the outbox.
				if st.Status != "queued" || st.TicketID != r.TicketID {
					fail("find_request %s: %+v, want queued with ticket %s", id, st, r.TicketID)
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failed calls over stdio, first: %s", len(failures), failures[0])
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("the session did not survive the calls: ping: %v", err)
	}

	// Closing stdin stops mcp-front; the tap exits with its status, or 3 if
	// stdout carried anything but JSON-RPC lines.
	closed = true
	if err := cs.Close(); err != nil {
		t.Errorf("closing the stdio session: %v (mcp-front exited non-zero, or its stdout was not pure JSON-RPC)", err)
	}
	logf.Close()
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "TAP VIOLATION") {
		t.Errorf("mcp-front wrote something other than JSON-RPC lines to stdout (see its stderr)")
	}
	if !strings.Contains(string(log), "mcp-front serving MCP on stdio") {
		t.Errorf("mcp-front's start-up log line is not on stderr")
	}

	n := workers * perWorker
	if c := countRows(t, openDB(t, db)); c != (rowCounts{n, n, n}) {
		t.Errorf("rows (requests, tickets, outbox) = %+v, want %d of each", c, n)
	}
}

// The tap itself must catch what the client might not: a line that is not
// JSON-RPC, a JSON value that is not a JSON-RPC message, an unterminated
// last line.
func TestStdoutTapCatchesStrayOutput(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, c := range []struct {
		out  string
		code int
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n", 0},
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\nstarting up\n", 3},
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" + `{"id":2}` + "\n", 3},
		{`{"jsonrpc":"2.0","id":1} {"jsonrpc":"2.0","id":2}` + "\n", 3},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, 3},
		{"\n", 3},
	} {
		cmd := exec.Command(self, "-c", `printf '%s' "$1"`, "sh", c.out)
		cmd.SysProcAttr = e2eproc.DieWithParent()
		cmd.Env = append(os.Environ(), tapEnv+"="+sh)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || stdout.String() != c.out {
			t.Errorf("tap over %q: exit %d, forwarded %q; want exit %d and the bytes unchanged (stderr %q)",
				c.out, code, stdout.String(), c.code, stderr.String())
		}
	}
}
