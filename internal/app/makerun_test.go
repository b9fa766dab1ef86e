package app_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/testkit/e2eproc"
)

// make run's last words name what to change, from the failed process's
// exit status: DATA= for a data directory another dispatcher holds, the
// port variables of the process whose port is in use. It runs the
// repository's Makefile on the binaries of bins (BUILD=: skips its build).
func TestMakeRunNamesTheCause(t *testing.T) {
	b := bins(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root, err := e2eproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"Makefile": filepath.Join(root, "Makefile"),
		"bin/dispatcher": b["dispatcher"], "bin/mcp-front": b["mcp-front"]} {
		if err := os.Symlink(target, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	makeRun := func(vars ...string) (lastWords []string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", append([]string{"-s", "run", "BUILD=:", "DISPATCHER_METRICS=", "FRONT_METRICS="}, vars...)...)
		var errb bytes.Buffer
		cmd.Dir, cmd.Stdout, cmd.Stderr = work, &errb, &errb
		// A make above this test (make test) must not pass its flags down.
		cmd.Env = e2eproc.WithoutEnv(e2eproc.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
		err := cmd.Run()
		if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
			t.Fatalf("make run %v: %v, want it to fail\n%s", vars, err, errb.String())
		}
		for _, l := range lines(errb.String()) {
			if strings.HasPrefix(l, "make run: ") && !strings.HasPrefix(l, "make run: building") &&
				!strings.HasPrefix(l, "make run: dispatcher (NATS") && !strings.HasPrefix(l, "make run: stopping") {
				lastWords = append(lastWords, l)
			}
		}
		if len(lastWords) == 0 {
			t.Fatalf("make run %v said nothing of why it stopped:\n%s", vars, errb.String())
		}
		return lastWords
	}

	t.Run("data directory in use", func(t *testing.T) {
		data := t.TempDir()
		start(t, dispatcher.Run, newEnv(), dispatcherArgs(data)...)
		said := makeRun("DATA="+data, "NATS_LISTEN=127.0.0.1:0", "LISTEN=127.0.0.1:0")
		if len(said) != 1 || !strings.Contains(said[0], "another dispatcher holds the data directory "+data+"/") ||
			!strings.Contains(said[0], "DATA=") || strings.Contains(said[0], "LISTEN") {
			t.Errorf("make run on a held data directory said %q; want one line naming DATA= and no port", said)
		}
	})

	t.Run("port in use", func(t *testing.T) {
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		said := makeRun("DATA="+t.TempDir(), "NATS_LISTEN=127.0.0.1:0", "LISTEN="+held.Addr().String())
		if len(said) != 1 || !strings.Contains(said[0], "mcp-front exited (status 4): a port is in use") ||
			!strings.Contains(said[0], "LISTEN and FRONT_METRICS") || strings.Contains(said[0], "DATA") {
			t.Errorf("make run with LISTEN on a port in use said %q; want one line naming mcp-front's port variables", said)
		}
	})
}
