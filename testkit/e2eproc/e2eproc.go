// Package e2eproc runs ticketrelay's binaries as real processes on loopback
// ports for the end-to-end tests (testkit/e2e/...) and the torture program: it
// builds cmd/mcp-front and cmd/dispatcher, launches a binary and waits until
// it serves, stops it with SIGINT or SIGKILL, and calls the MCP tools of
// mcp-front. Launch and the methods of Proc return errors; Start and the
// helpers that take a testing.TB are for tests. The benchmark harness
// (bench/) launches its servers with it too.
package e2eproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// StopTimeout bounds a clean shutdown after SIGINT.
const StopTimeout = 15 * time.Second

// serveTimeout bounds the wait for a launched process to serve, unless its
// Spec says otherwise.
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

// Environ is the environment of a started process: the caller's own,
// without its TICKETRELAY_* variables, plus extra.
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

// Spec says how to launch one process.
type Spec struct {
	Name string   // instance name, e.g. "dispatcher-3": names the log and address files
	Bin  string   // binary path
	Args []string // without -addr-file
	Env  []string // added to Environ()
	// The process announces itself with -addr-file, which must list every
	// key of Want; unless TCPAddr is set: then it gets no -addr-file and
	// TCPAddr is polled until it accepts (a third-party server).
	Want    []string
	TCPAddr string
	// Optional; the zero values launch as the tests do.
	Dir          string               // working directory; "": the caller's
	SysProcAttr  *syscall.SysProcAttr // nil: DieWithParent(), so that the process dies with the caller
	ServeTimeout time.Duration        // the wait for it to serve; 0: 30s
}

// Proc is one running instance of a binary.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	addrs   map[string]string
	done    chan struct{} // closed when the process has exited
	waitErr error         // cmd.Wait's answer, valid once done is closed
	// exitExpected is set before the caller signals the process, or once
	// it has checked how the process ended: the exit is not a crash.
	exitExpected atomic.Bool
}

// Launch starts s, with its stdout and stderr logged to dir/<name>.log
// (truncated), and waits until it serves; a dir/<name>.addr.json left by an
// earlier instance of the same name is removed first. It fails early, with
// the end of the log, if the process exits first, and kills the process if
// it does not serve within s.ServeTimeout (default 30s) or ctx ends.
// Unless s.SysProcAttr says otherwise, the process is killed when the
// caller exits (DieWithParent).
func Launch(ctx context.Context, dir string, s Spec) (*Proc, error) {
	p := &Proc{name: s.Name, logPath: filepath.Join(dir, s.Name+".log"), done: make(chan struct{})}
	args := s.Args
	addrFile := filepath.Join(dir, s.Name+".addr.json")
	if s.TCPAddr == "" {
		if err := os.Remove(addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		args = append(append([]string(nil), args...), "-addr-file", addrFile)
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	p.cmd = exec.Command(s.Bin, args...)
	p.cmd.Dir = s.Dir
	p.cmd.Env = Environ(s.Env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = s.SysProcAttr
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = DieWithParent()
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	timeout := s.ServeTimeout
	if timeout <= 0 {
		timeout = serveTimeout
	}
	deadline := time.Now().Add(timeout)
	for {
		ready, err := p.ready(s, addrFile)
		if err != nil {
			p.kill()
			return nil, err
		}
		if ready {
			return p, nil
		}
		select {
		case <-p.done:
			// A process may serve and die between two looks (a crash
			// test's failpoint can fire as soon as its services start):
			// it served, and its death is the caller's to handle.
			if ready, _ := p.ready(s, addrFile); ready {
				return p, nil
			}
			return nil, fmt.Errorf("%s exited before it served (%v): %s", s.Name, p.waitErr, p.Tail(2000))
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s did not serve within %s: %s", s.Name, timeout, p.Tail(2000))
		}
	}
}

// ready reports whether the process serves: TCPAddr accepts, or the
// -addr-file is there, with every wanted address.
func (p *Proc) ready(s Spec, addrFile string) (bool, error) {
	if s.TCPAddr != "" {
		c, err := net.DialTimeout("tcp", s.TCPAddr, 200*time.Millisecond)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	}
	b, err := os.ReadFile(addrFile)
	if err != nil {
		return false, nil
	}
	var addrs map[string]string
	if err := json.Unmarshal(b, &addrs); err != nil {
		return false, fmt.Errorf("%s: -addr-file %s: %w: %q", s.Name, addrFile, err, b)
	}
	for _, k := range s.Want {
		if addrs[k] == "" {
			return false, fmt.Errorf("%s: -addr-file has no %q address: %s", s.Name, k, b)
		}
	}
	p.addrs = addrs
	return true, nil
}

// Start launches bin with args (plus -addr-file) and the environment
// Environ(env...), logs its output to dir/name.log and waits until it
// announces its addresses, which must include every key in want.
//
// At the end of the test a running process gets SIGINT and must exit with
// status 0 within StopTimeout; a process that exited during the test fails
// it unless ExpectExit (or Kill9) was called. The log is shown if the test
// failed.
func Start(t testing.TB, dir, name, bin string, args, env []string, want ...string) *Proc {
	t.Helper()
	p, err := Launch(context.Background(), dir, Spec{Name: name, Bin: bin, Args: args, Env: env, Want: want})
	if err != nil {
		DumpLog(t, name, filepath.Join(dir, name+".log"))
		t.Fatal(err)
	}
	p.stopAtEnd(t)
	return p
}

// stopAtEnd has p's log shown if t failed, and at the end of t stops p if
// it runs, or fails t if it exited without ExpectExit.
func (p *Proc) stopAtEnd(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			DumpLog(t, p.name, p.logPath)
		}
	})
	t.Cleanup(func() {
		switch {
		case !p.Exited():
			p.Stop(t)
		case !p.ExitExpected():
			t.Errorf("%s exited during the test: %v", p.name, p.waitErr)
		}
	})
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

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

// ExpectExit records that the process is meant to exit: it is being
// stopped or killed, or the caller has checked how it did.
func (p *Proc) ExpectExit() { p.exitExpected.Store(true) }

// ExitExpected reports whether ExpectExit (or Shutdown, Stop or Kill9) was
// called.
func (p *Proc) ExitExpected() bool { return p.exitExpected.Load() }

// Shutdown sends SIGINT and waits for the process to exit with status 0:
// a clean shutdown is part of the product. After StopTimeout it kills the
// process and reports it.
func (p *Proc) Shutdown() error {
	p.ExpectExit()
	// An error means the process has exited, or the wait below kills it.
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s did not shut down cleanly on SIGINT: %w", p.name, p.waitErr)
		}
		return nil
	case <-time.After(StopTimeout):
		p.kill()
		return fmt.Errorf("%s still running %s after SIGINT; killed", p.name, StopTimeout)
	}
}

// Stop is Shutdown for a test: it fails the test if the process does not
// shut down cleanly.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	// Connections the client dialled but never used look "new" to the
	// server, and http.Server.Shutdown waits up to 5s for them: hang up
	// as a client that is done would.
	http.DefaultClient.CloseIdleConnections()
	began := time.Now()
	err := p.Shutdown()
	if d := time.Since(began); d > 2*time.Second {
		t.Logf("%s took %s to shut down", p.name, d.Round(time.Millisecond))
	}
	if err != nil {
		t.Error(err)
	}
}

// Kill9 kills the process with SIGKILL (it may be called from any
// goroutine); the caller waits on Done.
func (p *Proc) Kill9() {
	p.ExpectExit()
	_ = p.cmd.Process.Kill()
}

// kill is Kill9 and the wait.
func (p *Proc) kill() {
	p.Kill9()
	<-p.done
}

// KilledBySIGKILL reports whether the process has exited by SIGKILL.
func (p *Proc) KilledBySIGKILL() bool {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Log is what the process has written to stdout and stderr so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// Tail is the last n bytes of Log.
func (p *Proc) Tail(n int) string { return tail(p.Log(), n) }

func tail(s string, n int) string {
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// FreeAddr returns a loopback address ("127.0.0.1:port") whose port was
// free a moment ago, for a process that must be told its port in advance.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// DumpLog logs the last 64 KiB of the log file path of the process name.
func DumpLog(t testing.TB, name, path string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	t.Logf("----- log of %s (%s) -----\n%s----- end of %s -----", name, path, tail(string(b), 64<<10), name)
}
