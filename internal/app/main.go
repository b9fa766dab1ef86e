package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Exit statuses beside 0 (done, or stopped by a signal) and 1 (any other
// failure): the causes a launcher (make run, a unit's restart policy) tells
// apart to say what to change.
const (
	ExitUsage     = 2 // a command-line error (ErrUsage)
	ExitDataInUse = 3 // the dispatcher's data directory is held by another dispatcher (ErrDataInUse)
	ExitPortInUse = 4 // a port a flag asked for is in use by another process (ListenError)
)

// ErrDataInUse marks the refusal of a data directory another dispatcher
// holds.
var ErrDataInUse = errors.New("data directory in use")

// Main runs a process with the real environment, stops it on SIGINT or
// SIGTERM, and maps its error to an exit status (ExitUsage and the others).
func Main(run func(context.Context, Env) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, Env{
		Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Lookup: os.LookupEnv,
	})
	os.Exit(exitStatus(os.Stderr, filepath.Base(os.Args[0]), err, ctx.Err() != nil))
}

// exitStatus reports err on w and returns the process's exit status: 0 for
// none, ExitUsage, ExitDataInUse or ExitPortInUse for those causes, 1 for
// anything else. An error that is only
// the stop itself (context.Canceled after SIGINT or SIGTERM, however deep
// in the start-up it came) is a clean stop, not a failure: when make run
// stops one process because the other failed, the line that matters is
// the other's, and a second, misleading one ("migrate: context canceled")
// would hide it.
func exitStatus(w io.Writer, prog string, err error, stopped bool) int {
	switch {
	case err == nil, stopped && errors.Is(err, context.Canceled):
		return 0
	}
	fmt.Fprintf(w, "%s: %v\n", prog, err)
	switch {
	case errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, ErrDataInUse):
		return ExitDataInUse
	case errors.Is(err, syscall.EADDRINUSE):
		return ExitPortInUse
	}
	return 1
}

// GC is a process's garbage collector setting.
type GC struct {
	Percent int   // GOGC
	Limit   int64 // GOMEMLIMIT in bytes; 0: none
	// Backlog is GOGC while the dispatcher drains a backlog (DrainingGC);
	// 0: Percent throughout.
	Backlog int
}

// FrontGC collects at 5× the live heap with a 32 MiB soft limit. Since the
// JSON decoder stopped allocating 32 KiB per message (third_party/
// segmentio-encoding), a call leaves little garbage; collecting less often
// than Go's default still gains throughput, and the limit holds the peak
// RSS down where a higher one bought no throughput and a lower one cost
// some (decision 0080 has the measurements).
var FrontGC = GC{Percent: 400, Limit: 32 << 20}

// DispatcherGC collects at 1.25× the live heap, which is mostly the embedded
// nats-server's block buffers (4 MB each, held for the blocks read or written
// in the last ~10 s) and its duplicate window, so a lower setting is what
// keeps the peak RSS within the memory target. The price is CPU a ticket and a
// slower backlog relay, still well ahead of raw publish (decisions 0080 and
// 0062 have the measurements). No memory limit: the duplicate window makes the
// live heap grow with the ticket rate, and a fixed limit starved a backlog's
// relay.
//
// While it drains a backlog it collects at 1.5× instead: a backlog is when
// delivery speed matters most, and the memory is spent only for as long as
// the backlog lasts (decision 0064 has the measurements).
var DispatcherGC = GC{Percent: 25, Backlog: 50}

// drainGC is the setting DrainingGC switches between: the zero GC, with
// no Backlog, until TuneGC applies one.
var drainGC struct {
	sync.Mutex
	gc GC
}

// TuneGC applies gc unless the operator set GOGC or GOMEMLIMIT.
func TuneGC(lookup func(string) (string, bool), gc GC) {
	drainGC.Lock()
	drainGC.gc = GC{}
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(gc.Percent)
		drainGC.gc = gc
	}
	drainGC.Unlock()
	if _, set := lookup("GOMEMLIMIT"); !set && gc.Limit > 0 {
		debug.SetMemoryLimit(gc.Limit)
	}
}

// DrainingGC switches the collector to the setting's Backlog while a
// backlog drains (draining) and back to its Percent after. It does nothing
// unless TuneGC applied a setting with a Backlog: an operator's GOGC holds
// throughout.
func DrainingGC(draining bool) {
	drainGC.Lock()
	defer drainGC.Unlock()
	if drainGC.gc.Backlog == 0 {
		return
	}
	if draining {
		debug.SetGCPercent(drainGC.gc.Backlog)
	} else {
		debug.SetGCPercent(drainGC.gc.Percent)
	}
}

// StopMemProfile turns off the heap profile's sampling, unless the operator
// set GODEBUG=memprofilerate. Go samples one allocation per 512 KiB for
// runtime/pprof by default and keeps each sampled stack for the life of the
// process, in a 1.4 MB hash table that a new stack touches at a random page.
// Neither process serves pprof, so the samples fed nothing but resident memory
// (decision 0082 has the measurements). Call it first in main: package
// initialisation has sampled already.
func StopMemProfile(lookup func(string) (string, bool)) {
	if v, _ := lookup("GODEBUG"); strings.Contains(v, "memprofilerate=") {
		return
	}
	runtime.MemProfileRate = 0
}

// BuildThenRun builds a process and runs it. A stop (ctx ended) during the
// build, while it waited for a server say, is a clean stop, not an error.
func BuildThenRun(ctx context.Context, build, run func(context.Context) error) error {
	if err := build(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	return run(ctx)
}

// Closers undoes what a process's build made: each step adds what undoes
// it, and Close runs them last first.
type Closers struct{ fns []func() }

// OnClose has Close call f, before what was added earlier.
func (c *Closers) OnClose(f func()) { c.fns = append(c.fns, f) }

// Close runs what was added, in reverse.
func (c *Closers) Close() {
	for _, f := range slices.Backward(c.fns) {
		f()
	}
	c.fns = nil
}
