package torture_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"ticketrelay/testkit/torture"
)

// Paths of the binaries TestMain builds.
var (
	frontBin      string
	dispatcherBin string
	natsBin       string
)

func TestMain(m *testing.M) {
	torture.ChildMain() // the power-cut run reads SQLite in a child: this binary run again
	os.Exit(buildAndRun(m))
}

// buildAndRun builds mcp-front, the dispatcher and nats-server (from the
// module cache) into a temporary directory, then runs the tests.
func buildAndRun(m *testing.M) int {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		fmt.Fprintln(os.Stderr, "torture: not inside a Go module:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ticketrelay-torture-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
		"./cmd/mcp-front", "./cmd/dispatcher", "github.com/nats-io/nats-server/v2")
	build.Dir = filepath.Dir(gomod)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "torture: building the binaries:", err)
		return 1
	}
	frontBin = filepath.Join(dir, "mcp-front")
	dispatcherBin = filepath.Join(dir, "dispatcher")
	natsBin = filepath.Join(dir, "nats-server")
	return m.Run()
}
