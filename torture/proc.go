package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// startTimeout bounds how long a process may take to serve.
const startTimeout = 30 * time.Second

// stopTimeout bounds a clean shutdown after SIGINT.
const stopTimeout = 15 * time.Second

// procSpec says how to start one instance of a component.
type procSpec struct {
	name string   // instance name, e.g. "dispatcher-3": names the log file
	bin  string   // binary path
	args []string // without -addr-file
	env  []string // added to the environment (TICKETRELAY_* of the caller dropped)
	// addrFile: the process announces itself with -addr-file (and must list
	// every key of want); otherwise tcpAddr is polled until it accepts.
	addrFile bool
	want     []string
	tcpAddr  string
}

// proc is one running instance.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	addrs   map[string]string
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid once done is closed
	// killed is set before the harness signals the process, so that its
	// exit is not taken for a crash.
	killed atomic.Bool
}

// startProc starts spec in dir and waits until it serves.
func startProc(ctx context.Context, dir string, spec procSpec) (*proc, error) {
	p := &proc{name: spec.name, logPath: filepath.Join(dir, spec.name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := spec.args
	addrFile := filepath.Join(dir, spec.name+".addr.json")
	if spec.addrFile {
		args = append(append([]string(nil), args...), "-addr-file", addrFile)
	}
	p.cmd = exec.Command(spec.bin, args...)
	p.cmd.Env = append(withoutEnv(os.Environ(), "TICKETRELAY_"), spec.env...)
	p.cmd.Stderr = logf
	p.cmd.Stdout = logf
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		ready, err := p.ready(spec, addrFile)
		if err != nil {
			p.kill()
			return nil, err
		}
		if ready {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it served (%v): %s", spec.name, p.waitErr, p.tail(2000))
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s did not serve within %s: %s", spec.name, startTimeout, p.tail(2000))
		}
	}
}

func (p *proc) ready(spec procSpec, addrFile string) (bool, error) {
	if !spec.addrFile {
		c, err := net.DialTimeout("tcp", spec.tcpAddr, 200*time.Millisecond)
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
		return false, fmt.Errorf("%s: -addr-file: %w: %q", spec.name, err, b)
	}
	for _, k := range spec.want {
		if addrs[k] == "" {
			return false, fmt.Errorf("%s: -addr-file has no %q address: %s", spec.name, k, b)
		}
	}
	p.addrs = addrs
	return true, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	p.killed.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGINT and waits for a clean exit (status 0); after
// stopTimeout it kills the process and reports it.
func (p *proc) stop() error {
	if p.exited() {
		return nil
	}
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s did not shut down cleanly on SIGINT: %w", p.name, p.waitErr)
		}
		return nil
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s still running %s after SIGINT; killed", p.name, stopTimeout)
	}
}

// sigkilled reports whether the process died of SIGKILL.
func (p *proc) sigkilled() bool {
	if !p.exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// log returns the process's stderr so far.
func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) tail(n int) string {
	s := p.log()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// withoutEnv drops the variables whose names start with prefix.
func withoutEnv(env []string, prefix string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// freePort returns a loopback address with a port that was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
