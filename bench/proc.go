package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"ticketrelay/testkit/e2eproc"
)

var selfPID = os.Getpid()

// serveTimeout bounds the wait for a server to serve: mcp-front opens a
// prefilled ledger of up to 1.5 GB first.
const serveTimeout = 2 * time.Minute

// proc is a real server process started by the harness. It announces its
// listening addresses through -addr-file; its stdout and stderr go to a log
// file beside its data.
type proc struct {
	*e2eproc.Proc
	pprof string // profwrap's pprof listener, which its -addr-file does not list
}

// startProc runs bin with args plus -addr-file, in dir, and waits until it
// has announced the addresses want. It dies with the harness (childAttr).
func startProc(ctx context.Context, name, bin, dir string, args, env []string, want ...string) (*proc, error) {
	p, err := e2eproc.Launch(ctx, dir, e2eproc.Spec{
		Name: name, Bin: bin, Args: args, Env: env, Want: want,
		Dir: dir, SysProcAttr: childAttr(), ServeTimeout: serveTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &proc{Proc: p}, nil
}

func (p *proc) mcpURL() string { return "http://" + p.Addr("mcp") + "/mcp" }

func (p *proc) pprofAddr() string {
	if p.pprof != "" {
		return p.pprof
	}
	return p.Addr("pprof")
}

func (p *proc) peakRSS() (int64, error) { return peakRSS(p.Pid()) }

// stop asks the process to shut down (SIGINT) and kills it if it has not
// within e2eproc.StopTimeout. It reports an unclean exit, or an earlier
// one, with the end of the log; it may be called again.
func (p *proc) stop() error {
	if p.Exited() {
		if err := p.Err(); err != nil {
			return fmt.Errorf("bench: %s exited: %w:\n%s", p.Name(), err, p.logTail())
		}
		return nil
	}
	if err := p.Shutdown(); err != nil {
		return fmt.Errorf("bench: %w:\n%s", err, p.logTail())
	}
	return nil
}

// logTail is the end of the process's log, for error messages.
func (p *proc) logTail() string { return strings.TrimRight(p.Tail(4000), "\n") }
