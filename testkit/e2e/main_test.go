package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"

	"ticketrelay/testkit/e2eproc"
)

// Paths of the binaries built once by TestMain.
var (
	frontBin      string
	dispatcherBin string
)

// tapEnv, when set, turns the test binary into a stdout tap (see runTap):
// the value is the program to run behind it.
const tapEnv = "TICKETRELAY_E2E_TAP_EXEC"

func TestMain(m *testing.M) {
	if exe := os.Getenv(tapEnv); exe != "" {
		os.Exit(runTap(exe, os.Args[1:]))
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ticketrelay-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if frontBin, dispatcherBin, err = e2eproc.Build(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// runTap runs exe with args behind a tap on its stdout: stdin and stderr are
// inherited, every byte exe writes to stdout is forwarded unchanged and
// checked to be a JSON-RPC 2.0 message on a line of its own. A violation is
// reported on stderr (prefixed "TAP VIOLATION") and makes the tap exit with
// status 3; otherwise the tap exits with exe's status. SIGTERM and SIGINT
// are passed on to exe.
func runTap(exe string, args []string) int {
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = e2eproc.DieWithParent()
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	cmd.Env = e2eproc.WithoutEnv(os.Environ(), tapEnv)
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "TAP VIOLATION: stdout pipe:", err)
		return 3
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "TAP VIOLATION: start:", err)
		return 3
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	violations := checkJSONRPCLines(out, os.Stdout, func(msg string) {
		fmt.Fprintln(os.Stderr, "TAP VIOLATION:", msg)
	})
	err = cmd.Wait()
	signal.Stop(sigs)
	if violations > 0 {
		return 3
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tap: child:", err)
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
		return 4
	}
	return 0
}

// checkJSONRPCLines copies r to w and reports every line of r that is not
// one JSON object with "jsonrpc":"2.0" (and anything after the last newline).
// It returns the number of violations.
func checkJSONRPCLines(r io.Reader, w io.Writer, report func(string)) int {
	br := bufio.NewReaderSize(r, 64*1024)
	violations, n := 0, 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				report(fmt.Sprintf("forwarding stdout: %v", werr))
				violations++
			}
			n++
			if msg := checkJSONRPCLine(line); msg != "" {
				report(fmt.Sprintf("stdout line %d: %s: %.200q", n, msg, line))
				violations++
			}
		}
		if err != nil {
			if err != io.EOF {
				report(fmt.Sprintf("reading stdout: %v", err))
				violations++
			}
			return violations
		}
	}
}

func checkJSONRPCLine(line []byte) string {
	if !bytes.HasSuffix(line, []byte("\n")) {
		return "not terminated by a newline"
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&m); err != nil {
		return "not a JSON object: " + err.Error()
	}
	if dec.More() {
		return "more than one JSON value on the line"
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		return `no "jsonrpc":"2.0" member`
	}
	return ""
}
