package app_test

import (
	"context"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/internal/app"
	"ticketrelay/testkit/testio"
)

// fakeEnv is a process environment: vars it holds, and a record of every
// name the process asked for.
type fakeEnv struct {
	mu    sync.Mutex
	vars  map[string]string
	asked []string
}

func newEnv(kv ...string) *fakeEnv {
	e := &fakeEnv{vars: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.vars[kv[i]] = kv[i+1]
	}
	return e
}

func (e *fakeEnv) Lookup(k string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, k)
	v, ok := e.vars[k]
	return v, ok
}

func (e *fakeEnv) Asked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.asked)
}

// running is a process started by start.
type running struct {
	addrs  map[string]string
	stderr *testio.Buffer
	cancel context.CancelFunc
	done   chan error
}

// start runs a process in-process until it announces its addresses, and
// stops it (expecting a clean exit) when the test ends.
func start(t *testing.T, run func(context.Context, app.Env) error, env *fakeEnv, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stderr: &testio.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan map[string]string, 1)
	go func() {
		r.done <- run(ctx, app.Env{
			Args: args, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: r.stderr, Lookup: env.Lookup,
			Ready: func(a map[string]string) { ready <- a },
		})
	}()
	select {
	case r.addrs = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("process exited before serving: %v\nstderr:\n%s", err, r.stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("process not serving after 30s\nstderr:\n%s", r.stderr)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("process exited with %v\nstderr:\n%s", err, r.stderr)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("process did not stop within 30s of its context ending\nstderr:\n%s", r.stderr)
		}
	})
	return r
}

// runOnce runs a process that is expected to return by itself (a config
// error, -help, an admin command) and returns its error and output.
func runOnce(t *testing.T, run func(context.Context, app.Env) error, env *fakeEnv, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb testio.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, app.Env{Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Lookup: env.Lookup,
			Ready: func(map[string]string) { t.Errorf("%v: the process started serving; it should have stopped", args) }})
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatalf("%v: still running after 20s\nstderr:\n%s", args, errb.String())
	}
	return out.String(), errb.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestTuneGC: the process's setting applies unless the operator set GOGC or
// GOMEMLIMIT.
func TestTuneGC(t *testing.T) {
	percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	current := func() (int, int64) {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p, debug.SetMemoryLimit(-1)
	}
	for _, tc := range []struct {
		env          *fakeEnv
		gc           app.GC
		wantPercent  int
		wantLimitMiB int64
	}{
		{newEnv(), app.FrontGC, 400, 32},
		{newEnv(), app.DispatcherGC, 25, math.MaxInt64 >> 20},
		{newEnv("GOGC", "100"), app.FrontGC, 100, 32},
		{newEnv("GOMEMLIMIT", "1GiB"), app.FrontGC, 400, math.MaxInt64 >> 20},
	} {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
		app.TuneGC(tc.env.Lookup, tc.gc)
		if p, l := current(); p != tc.wantPercent || l>>20 != tc.wantLimitMiB {
			t.Errorf("%+v with %v: GOGC %d, limit %d MiB; want %d, %d MiB", tc.gc, tc.env.Asked(), p, l>>20, tc.wantPercent, tc.wantLimitMiB)
		}
	}
}

// TestDrainingGC: while a backlog drains the dispatcher's setting switches
// to its Backlog and back after, unless the operator set GOGC.
func TestDrainingGC(t *testing.T) {
	percent := debug.SetGCPercent(100)
	t.Cleanup(func() {
		app.TuneGC(newEnv("GOGC", "100").Lookup, app.GC{}) // no switch left for later tests
		debug.SetGCPercent(percent)
	})
	current := func() int {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	app.TuneGC(newEnv().Lookup, app.DispatcherGC)
	for _, step := range []struct {
		draining bool
		want     int
	}{{true, app.DispatcherGC.Backlog}, {true, app.DispatcherGC.Backlog}, {false, app.DispatcherGC.Percent}} {
		app.DrainingGC(step.draining)
		if got := current(); got != step.want {
			t.Errorf("DrainingGC(%v): GOGC %d, want %d", step.draining, got, step.want)
		}
	}
	if app.DispatcherGC.Backlog <= app.DispatcherGC.Percent {
		t.Errorf("the dispatcher collects at GOGC=%d while draining, not less often than its %d", app.DispatcherGC.Backlog, app.DispatcherGC.Percent)
	}

	debug.SetGCPercent(100)
	app.TuneGC(newEnv("GOGC", "100").Lookup, app.DispatcherGC)
	app.DrainingGC(true)
	if got := current(); got != 100 {
		t.Errorf("DrainingGC(true) with the operator's GOGC=100: GOGC %d, want 100 kept", got)
	}
}

// TestStopMemProfile: sampling stops unless the operator asked for a rate.
func TestStopMemProfile(t *testing.T) {
	rate := runtime.MemProfileRate
	t.Cleanup(func() { runtime.MemProfileRate = rate })
	for _, tc := range []struct {
		env  *fakeEnv
		want int
	}{
		{newEnv(), 0},
		{newEnv("GODEBUG", "gctrace=1"), 0},
		{newEnv("GODEBUG", "gctrace=1,memprofilerate=4096"), 512 << 10},
	} {
		runtime.MemProfileRate = 512 << 10
		app.StopMemProfile(tc.env.Lookup)
		if runtime.MemProfileRate != tc.want {
			t.Errorf("with %v: MemProfileRate %d, want %d", tc.env.Asked(), runtime.MemProfileRate, tc.want)
		}
	}
}

func TestIsLoopbackListen(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:0": true, "[::1]:80": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "10.0.0.5:80": false, "example.com:80": false, "bad": false,
	} {
		if got := app.IsLoopbackListen(addr); got != want {
			t.Errorf("IsLoopbackListen(%q) = %v", addr, got)
		}
	}
}
