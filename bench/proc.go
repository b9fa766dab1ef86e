package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

var selfPID = os.Getpid()

// proc is a real server process started by the harness. It announces its
// listening addresses through -addr-file; its stdout and stderr go to a log
// file beside its data.
type proc struct {
	name    string
	addrs   map[string]string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// startProc runs bin with args plus -addr-file, in dir, and waits until it
// has written its addresses.
func startProc(ctx context.Context, name, bin, dir string, args, env []string) (*proc, error) {
	addrFile := filepath.Join(dir, name+".addr.json")
	if err := os.Remove(addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	p := &proc{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child keeps its own descriptor
	p.cmd = exec.Command(bin, append(args, "-addr-file", addrFile)...)
	p.cmd.Dir = dir
	p.cmd.Stdout = logf
	p.cmd.Stderr = logf
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(addrFile)
		if err == nil {
			if err := json.Unmarshal(b, &p.addrs); err != nil {
				p.stop()
				return nil, fmt.Errorf("bench: %s -addr-file: %w", name, err)
			}
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("bench: %s exited before serving (%v):\n%s", name, p.waitErr, p.logTail())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("bench: %s did not announce its addresses within 2m:\n%s", name, p.logTail())
		}
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) mcpURL() string { return "http://" + p.addrs["mcp"] + "/mcp" }

// stop asks the process to shut down (SIGTERM) and kills it if it has not
// within 20s. It reports an unclean exit.
func (p *proc) stop() error {
	select {
	case <-p.done:
		return p.exitErr()
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitErr()
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("bench: %s ignored SIGTERM for 20s and was killed", p.name)
	}
}

func (p *proc) exitErr() error {
	if p.waitErr != nil {
		return fmt.Errorf("bench: %s: %w:\n%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

func (p *proc) peakRSS() (int64, error) { return peakRSS(p.pid()) }

// logTail is the end of the process's log, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}
