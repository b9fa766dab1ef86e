package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/app/front"
	"ticketrelay/testkit/e2eproc"
)

// The command line as a user meets it, on the real binaries: -version,
// short usage errors, -help without the benchmark flags, a ledger path
// that does not exist, and a port in use.

const testVersion = "v0.0.0-frontdoor"

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// bins builds both binaries once, with the version set as make build sets
// it, and returns their paths by name.
func bins(t *testing.T) map[string]string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	buildOnce.Do(func() {
		var root string
		if root, buildErr = e2eproc.ModuleRoot(); buildErr != nil {
			return
		}
		builtDir = filepath.Join(os.TempDir(), fmt.Sprintf("ticketrelay-frontdoor-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-ldflags", "-X ticketrelay/internal/app.Version="+testVersion,
			"-o", builtDir+string(os.PathSeparator), "./cmd/mcp-front", "./cmd/dispatcher")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building the binaries: %v", buildErr)
	}
	return map[string]string{"mcp-front": filepath.Join(builtDir, "mcp-front"), "dispatcher": filepath.Join(builtDir, "dispatcher")}
}

// runBin runs a binary to its exit (within 30 s) in dir and returns its
// output and exit status.
func runBin(t *testing.T, dir, bin string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.Env = dir, &out, &errb, e2eproc.Environ()
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		status = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return out.String(), errb.String(), status
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

func TestVersionFlag(t *testing.T) {
	for name, bin := range bins(t) {
		stdout, stderr, status := runBin(t, t.TempDir(), bin, "-version")
		if status != 0 || stdout != name+" "+testVersion+"\n" || stderr != "" {
			t.Errorf("%s -version: status %d, stdout %q, stderr %q; want 0, %q, nothing", name, status, stdout, stderr, name+" "+testVersion+"\n")
		}
	}
}

// An unknown flag gets the error, the short usage and a pointer to -help
// on stderr, exit 2: not the list of every flag.
func TestUnknownFlagIsShort(t *testing.T) {
	for name, bin := range bins(t) {
		dir := t.TempDir()
		stdout, stderr, status := runBin(t, dir, bin, "-no-such-flag")
		got := lines(stderr)
		if status != 2 || stdout != "" || len(got) < 3 || len(got) > 4 ||
			got[0] != name+": usage: flag provided but not defined: -no-such-flag" ||
			got[1] != "Usage: "+name+" [flags]" || got[len(got)-1] != "run "+name+" -help for the flags" {
			t.Errorf("%s -no-such-flag: status %d, stdout %q, stderr:\n%s\nwant status 2, the error, the synopsis and the pointer to -help",
				name, status, stdout, stderr)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s -no-such-flag left %v", name, entries)
		}
	}
}

// -help is asked for: it goes to stdout (so that `mcp-front -help | grep
// config` finds it) and exits 0, for -h and --help too.
func TestHelpOnStdout(t *testing.T) {
	for name, bin := range bins(t) {
		for _, arg := range []string{"-help", "-h", "--help"} {
			stdout, stderr, status := runBin(t, t.TempDir(), bin, arg)
			if status != 0 || stderr != "" || !strings.HasPrefix(stdout, "Usage: "+name+" [flags]\n") ||
				!strings.Contains(stdout, "  -config file  (env TICKETRELAY_CONFIG)\n") {
				t.Errorf("%s %s: status %d, stderr %q, stdout:\n%s\nwant status 0 and the help on stdout", name, arg, status, stderr, stdout)
			}
		}
	}
}

// -help lists the flags a user sets, with readable placeholders, and not
// the benchmarks' own flags (which are still accepted).
func TestHelpHidesBenchmarkFlags(t *testing.T) {
	stdout, _, status := runBin(t, t.TempDir(), bins(t)["mcp-front"], "-help")
	if status != 0 {
		t.Fatalf("-help: status %d", status)
	}
	for _, want := range []string{"-create-db", "-version", "-keepalive-failures n", "-session-timeout duration", "-rate-limit n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("-help does not show %q:\n%s", want, stdout)
		}
	}
	for _, unwanted := range []string{"bench-noop-tool", "many", "-session-timeout long", "default -1"} {
		if strings.Contains(stdout, unwanted) {
			t.Errorf("-help shows %q:\n%s", unwanted, stdout)
		}
	}
	r, _ := startFront(t, newEnv(), "-bench-noop-tool")
	if !strings.Contains(r.stderr.String(), "benchmark no-op tool enabled") {
		t.Errorf("-bench-noop-tool is not taken any more:\n%s", r.stderr)
	}
}

// Each dispatcher command says what it does and lists its own flags, the
// same for `help COMMAND` and `COMMAND -help`; `help` alone is -help.
func TestDispatcherCommandHelp(t *testing.T) {
	bin := bins(t)["dispatcher"]
	dir := t.TempDir()
	main, _, status := runBin(t, dir, bin, "-help")
	if status != 0 {
		t.Fatalf("-help: status %d", status)
	}
	if help, stderr, status := runBin(t, dir, bin, "help"); status != 0 || stderr != "" || help != main {
		t.Errorf("dispatcher help: status %d, stderr %q; want -help's text on stdout, got:\n%s", status, stderr, help)
	}
	for _, c := range []struct {
		name          string
		flags, others []string // its flags; others' it must not list
		says          string   // a piece of what it does
	}{
		{"status", []string{"db", "data", "json", "multi-host", "nats", "installation", "host-dead-after", "nats-creds"},
			[]string{"failed", "target", "delivered", "workers"}, "backlog"},
		{"redrive", []string{"db", "data", "failed", "target"}, []string{"json", "delivered", "nats", "multi-host"}, "same"},
		{"resolve", []string{"db", "data", "delivered", "failed"}, []string{"json", "target", "nats"}, "uncertain"},
		{"forget-host", []string{"nats", "installation", "nats-creds", "nats-user"}, []string{"db", "data", "json", "multi-host"}, "removed for good"},
	} {
		if !strings.Contains(main, "\n  "+c.name+" ") {
			t.Errorf("dispatcher -help does not list %s", c.name)
		}
		help, stderr, status := runBin(t, dir, bin, c.name, "-help")
		if status != 0 || stderr != "" || !strings.HasPrefix(help, "Usage: dispatcher "+c.name+" ") || !strings.Contains(help, c.says) {
			t.Errorf("%s -help: status %d, stderr %q, stdout:\n%s\nwant its synopsis and what it does", c.name, status, stderr, help)
		}
		entries := helpFlags(help)
		for _, f := range c.flags {
			if _, ok := entries[f]; !ok {
				t.Errorf("%s -help does not list -%s:\n%s", c.name, f, help)
			}
		}
		for _, f := range c.others {
			if _, ok := entries[f]; ok {
				t.Errorf("%s -help lists -%s, which is not its flag", c.name, f)
			}
		}
		if h, _, status := runBin(t, dir, bin, "help", c.name); status != 0 || h != help {
			t.Errorf("help %s: status %d, and not the text of %s -help:\n%s", c.name, status, c.name, h)
		}
		// A flag of another command is refused, with this one's usage.
		_, stderr, status = runBin(t, dir, bin, c.name, "-workers", "3")
		if got := lines(stderr); status != 2 || !strings.Contains(got[0], "flag provided but not defined: -workers") ||
			!strings.Contains(stderr, "Usage: dispatcher "+c.name+" ") || got[len(got)-1] != "run dispatcher "+c.name+" -help for the flags" {
			t.Errorf("%s -workers 3: status %d, stderr:\n%s\nwant status 2 and %s's short usage", c.name, status, stderr, c.name)
		}
	}
	for _, args := range [][]string{{"help", "stauts"}, {"help", "status", "redrive"}} {
		stdout, stderr, status := runBin(t, dir, bin, args...)
		if status != 2 || stdout != "" || !strings.Contains(stderr, "help") {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want status 2 and the error on stderr", args, status, stdout, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("help left %v", entries)
	}
}

// A -db that does not exist is refused in one line, and nothing is
// created; the default path and -create-db create it.
func TestFrontRefusesAnUnknownLedger(t *testing.T) {
	bin := bins(t)["mcp-front"]
	dir := t.TempDir()
	missing := filepath.Join(dir, "tickest.db")
	for _, extra := range [][]string{nil, {"-stdio"}} {
		args := append([]string{"-db", missing, "-listen", "127.0.0.1:0", "-metrics-listen", ""}, extra...)
		_, stderr, status := runBin(t, dir, bin, args...)
		if got := lines(stderr); status != 2 || len(got) != 1 || !strings.Contains(got[0], "-db "+missing+": no ledger there") ||
			!strings.Contains(got[0], "-create-db") {
			t.Errorf("%v: status %d, stderr:\n%s\nwant status 2 and one line naming -db and -create-db", args, status, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused starts left %v", entries)
	}
	start(t, front.Run, newEnv(), "-create-db", "-db", missing, "-listen", "127.0.0.1:0", "-metrics-listen", "")
	if _, err := os.Stat(missing); err != nil {
		t.Errorf("-create-db did not create the ledger: %v", err)
	}
	// The default path (data/tickets.db, the dispatcher's with its default
	// -data) is created as before.
	cwd := t.TempDir()
	t.Chdir(cwd)
	start(t, front.Run, newEnv(), "-listen", "127.0.0.1:0", "-metrics-listen", "")
	if _, err := os.Stat(filepath.Join(cwd, front.DefaultDB)); err != nil {
		t.Errorf("the default ledger was not created: %v", err)
	}
}

// A port in use stops the process with one line that names the flag and
// how to choose another.
func TestPortInUseIsOneLine(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	b := bins(t)
	dir := t.TempDir()
	for _, c := range []struct {
		bin, flag string
		args      []string
	}{
		{b["mcp-front"], "listen", []string{"-create-db", "-db", filepath.Join(dir, "f.db"), "-metrics-listen", "", "-listen", addr}},
		{b["mcp-front"], "metrics-listen", []string{"-create-db", "-db", filepath.Join(dir, "f.db"), "-listen", "127.0.0.1:0", "-metrics-listen", addr}},
		{b["dispatcher"], "metrics-listen", []string{"-data", filepath.Join(dir, "d1"), "-nats-listen", "127.0.0.1:0", "-metrics-listen", addr}},
		{b["dispatcher"], "nats-listen", []string{"-data", filepath.Join(dir, "d2"), "-metrics-listen", "", "-nats-listen", addr}},
	} {
		_, stderr, status := runBin(t, dir, c.bin, c.args...)
		want := fmt.Sprintf("-%s %s: the port is in use by another process; choose another with -%s HOST:PORT", c.flag, addr, c.flag)
		if got := lines(stderr); status != app.ExitPortInUse || len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("%s -%s on a port in use: status %d, stderr:\n%s\nwant status %d and one line %q", filepath.Base(c.bin), c.flag, status, stderr, app.ExitPortInUse, want)
		}
	}
}

// A process stopped while it starts (make run stops one when the other
// fails) exits 0 and says nothing, however deep the cancellation came from.
func TestStopDuringStartIsQuiet(t *testing.T) {
	var w bytes.Buffer
	canceled := fmt.Errorf("ledger: migrate %s: %w", "data/tickets.db", context.Canceled)
	if got := app.ExitStatus(&w, "dispatcher", canceled, true); got != 0 || w.Len() != 0 {
		t.Errorf("stopped: status %d, wrote %q; want 0, nothing", got, w.String())
	}
	if got := app.ExitStatus(&w, "dispatcher", canceled, false); got != 1 || !strings.Contains(w.String(), "context canceled") {
		t.Errorf("not stopped: status %d, wrote %q; want 1 and the error", got, w.String())
	}
	w.Reset()
	if got := app.ExitStatus(&w, "mcp-front", fmt.Errorf("%w: bad", app.ErrUsage), false); got != 2 || w.String() != "mcp-front: usage: bad\n" {
		t.Errorf("usage error: status %d, wrote %q", got, w.String())
	}
	// The causes make run tells apart have statuses of their own.
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("%w: data: held", app.ErrDataInUse), app.ExitDataInUse},
		{app.ListenError("listen", "127.0.0.1:8080", &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}), app.ExitPortInUse},
		{app.ListenError("listen", "127.0.0.1:8080", &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EACCES)}), 1},
	} {
		w.Reset()
		if got := app.ExitStatus(&w, "dispatcher", c.err, false); got != c.want || w.String() != "dispatcher: "+c.err.Error()+"\n" {
			t.Errorf("%v: status %d, wrote %q; want %d and the error", c.err, got, w.String(), c.want)
		}
	}
}

// The embedded nats-server starts quietly at the default log level; its
// lines are there with -log-level debug.
func TestEmbeddedNATSIsQuiet(t *testing.T) {
	quiet := start(t, dispatcher.Run, newEnv(), dispatcherArgs(t.TempDir())...)
	if n := strings.Count(quiet.stderr.String(), "component=nats-server"); n != 0 {
		t.Errorf("%d nats-server lines at the default log level:\n%s", n, quiet.stderr)
	}
	loud := start(t, dispatcher.Run, newEnv(), dispatcherArgs(t.TempDir(), "-log-level", "debug")...)
	if !strings.Contains(loud.stderr.String(), "component=nats-server") {
		t.Errorf("no nats-server line with -log-level debug:\n%s", loud.stderr)
	}
}
