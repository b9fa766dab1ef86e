// Package e2eproc is test support for the end-to-end tests (e2e/...): it
// builds cmd/mcp-front and cmd/dispatcher, runs them as real processes on
// loopback ports, stops them at the end of a test, and calls their MCP
// tools. Only tests import it; it is a normal package so that several test
// packages can share it.
package e2eproc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ticketrelay/internal/testwait"
)

// StopTimeout bounds a clean shutdown after SIGINT.
const StopTimeout = 15 * time.Second

// serveTimeout bounds the wait for a started process's -addr-file.
const serveTimeout = 30 * time.Second

// ModuleRoot is the directory of the go.mod that holds the current package.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module (go env GOMOD = %q)", gomod)
	}
	return filepath.Dir(gomod), nil
}

// Build builds cmd/mcp-front and cmd/dispatcher of the module at root into
// dir (created if need be) and returns the paths of the two binaries. The
// go command's output goes to stderr. A TestMain calls it once.
func Build(root, dir string) (front, dispatcher string, err error) {
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/mcp-front", "./cmd/dispatcher")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", "", fmt.Errorf("building the binaries: %w", err)
	}
	return filepath.Join(dir, "mcp-front"), filepath.Join(dir, "dispatcher"), nil
}

// Environ is the environment of a started process: the test's own, without
// its TICKETRELAY_* variables, plus extra.
func Environ(extra ...string) []string {
	return append(WithoutEnv(os.Environ(), "TICKETRELAY_*"), extra...)
}

// WithoutEnv returns env without the variables names; a name ending in "*"
// is a prefix.
func WithoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			if name == n || (strings.HasSuffix(n, "*") && strings.HasPrefix(name, strings.TrimSuffix(n, "*"))) {
				drop = true
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// Proc is one running instance of a binary.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	addrs   map[string]string
	done    chan struct{} // closed when the process has exited
	waitErr error         // cmd.Wait's answer, valid once done is closed
	// exitExpected is set when the test kills the process or has checked
	// that it killed itself; any other exit before the end fails the test.
	exitExpected atomic.Bool
}

// Start starts bin with args (plus -addr-file) and the environment
// Environ(env...), logs its stderr to dir/name.log and waits until it
// announces its addresses, which must include every key in want.
//
// At the end of the test a running process gets SIGINT and must exit with
// status 0 within StopTimeout; a process that exited during the test fails
// it unless ExpectExit (or Kill9) was called. The log is shown if the test
// failed.
func Start(t testing.TB, dir, name, bin string, args, env []string, want ...string) *Proc {
	t.Helper()
	p := &Proc{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	addrFile := filepath.Join(dir, name+".addr.json")
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(bin, append(args, "-addr-file", addrFile)...)
	p.cmd.Env = Environ(env...)
	p.cmd.Stderr = logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			DumpLog(t, p.name, p.logPath)
		}
	})
	t.Cleanup(func() {
		switch {
		case !p.Exited():
			p.Stop(t)
		case !p.exitExpected.Load():
			t.Errorf("%s exited during the test: %v", p.name, p.waitErr)
		}
	})

	testwait.For(t, serveTimeout, name+" to write its -addr-file", func() bool {
		b, err := os.ReadFile(addrFile)
		if err != nil {
			if p.Exited() {
				t.Fatalf("%s exited before it served: %v", name, p.waitErr)
			}
			return false
		}
		var addrs map[string]string
		if err := json.Unmarshal(b, &addrs); err != nil {
			t.Fatalf("%s: -addr-file %s: %v: %q", name, addrFile, err, b)
		}
		for _, k := range want {
			if addrs[k] == "" {
				t.Fatalf("%s: -addr-file has no %q address: %s", name, k, b)
			}
		}
		p.addrs = addrs
		return true
	})
	return p
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// Addr is the address the process announced under key ("mcp", "metrics",
// "nats"), or "" if it announced none.
func (p *Proc) Addr(key string) string { return p.addrs[key] }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process ended (exec.Cmd.Wait's answer); valid once Done is
// closed.
func (p *Proc) Err() error { return p.waitErr }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExpectExit tells the end of the test that the process was meant to exit
// (the test has checked how it did).
func (p *Proc) ExpectExit() { p.exitExpected.Store(true) }

// Stop sends SIGINT and checks that the process exits 0 within StopTimeout:
// a clean shutdown is part of the product.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	p.ExpectExit()
	// Connections the client dialled but never used look "new" to the
	// server, and http.Server.Shutdown waits up to 5s for them: hang up
	// as a client that is done would.
	http.DefaultClient.CloseIdleConnections()
	began := time.Now()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil && !p.Exited() {
		t.Errorf("%s: SIGINT: %v", p.name, err)
	}
	select {
	case <-p.done:
		if d := time.Since(began); d > 2*time.Second {
			t.Logf("%s took %s to shut down", p.name, d.Round(time.Millisecond))
		}
		if p.waitErr != nil {
			t.Errorf("%s did not shut down cleanly on SIGINT: %v", p.name, p.waitErr)
		}
	case <-time.After(StopTimeout):
		t.Errorf("%s still running %s after SIGINT; killing it", p.name, StopTimeout)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill9 kills the process with SIGKILL (it may be called from any
// goroutine); the caller waits on Done.
func (p *Proc) Kill9() {
	p.ExpectExit()
	_ = p.cmd.Process.Kill()
}

// KilledBySIGKILL reports whether the process has exited by SIGKILL.
func (p *Proc) KilledBySIGKILL() bool {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Log is what the process has written to stderr so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// DumpLog logs the last 64 KiB of the log file path of the process name.
func DumpLog(t testing.TB, name, path string) {
	t.Helper()
	const max = 64 << 10
	b, _ := os.ReadFile(path)
	s := string(b)
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	t.Logf("----- stderr of %s (%s) -----\n%s----- end of %s -----", name, path, s, name)
}
