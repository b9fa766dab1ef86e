package torture

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// childEnv makes the program a child process of Run: its value names the
// child's role. The power-cut mode reads the SQLite file on the mount in a
// child, never in the process that serves the mount: SQLite maps its -shm
// file, and a page fault on the mount from the serving process can deadlock
// with the garbage collector (docs/decisions/0014-powercut-durability-model.md).
const (
	childEnv   = "TICKETRELAY_TORTURE_CHILD"
	childDBEnv = "TICKETRELAY_TORTURE_DB"
)

// Child roles.
const (
	childProbe    = "probe"    // prints childProbeLine: the program calls ChildMain
	childSnapshot = "snapshot" // prints a childSnapshotOut as JSON
)

const childProbeLine = "torture child ready"

// childSnapshotOut is what the snapshot child prints.
type childSnapshotOut struct {
	Snapshot  Snapshot `json:"snapshot"`
	Integrity string   `json:"integrity"` // PRAGMA quick_check's answer
}

// ChildMain runs the child role this process was started for by Run (in the
// power-cut mode) and exits; in any other process it returns at once. Call
// it first in main, and in TestMain, of every program that calls Run with
// Config.PowerCut.
func ChildMain() {
	role := os.Getenv(childEnv)
	if role == "" {
		return
	}
	switch role {
	case childProbe:
		fmt.Println(childProbeLine)
		os.Exit(0)
	case childSnapshot:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := childSnapshotRead(ctx, os.Getenv(childDBEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, "torture snapshot child:", err)
			os.Exit(1)
		}
		if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "torture snapshot child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "torture: unknown child role %s=%q\n", childEnv, role)
		os.Exit(2)
	}
}

func childSnapshotRead(ctx context.Context, path string) (childSnapshotOut, error) {
	snap, err := ReadSnapshot(ctx, path)
	if err != nil {
		return childSnapshotOut{}, err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return childSnapshotOut{}, fmt.Errorf("torture: open %s: %w", path, err)
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return childSnapshotOut{}, fmt.Errorf("torture: quick_check %s: %w", path, err)
	}
	return childSnapshotOut{Snapshot: snap, Integrity: check}, nil
}

// runChild runs this program again as a child in role, and returns its
// standard output.
func runChild(ctx context.Context, role string, env ...string) ([]byte, error) {
	if os.Getenv(childEnv) != "" {
		return nil, errors.New("torture: Run called in a child process: the program does not call torture.ChildMain first")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("torture: child process: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, self)
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("torture: %s child: %w: %s", role, err, tail(stderr.String(), 600))
	}
	return stdout.Bytes(), nil
}

// probeChild checks that the program answers as a child: it calls ChildMain
// first.
func probeChild(ctx context.Context) error {
	out, err := runChild(ctx, childProbe)
	if err == nil && !bytes.HasPrefix(out, []byte(childProbeLine)) {
		err = fmt.Errorf("it printed %q", tail(string(out), 200))
	}
	if err != nil {
		return fmt.Errorf("torture: the power-cut mode reads SQLite in a child process, and this program did not answer as one "+
			"(call torture.ChildMain first in main and TestMain): %w", err)
	}
	return nil
}

// readSnapshotChild is ReadSnapshot, and a quick_check, in a child process.
func readSnapshotChild(ctx context.Context, path string) (childSnapshotOut, error) {
	b, err := runChild(ctx, childSnapshot, childDBEnv+"="+path)
	if err != nil {
		return childSnapshotOut{}, err
	}
	var out childSnapshotOut
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("torture: snapshot child: %w", err)
	}
	if out.Snapshot.Rows == nil {
		out.Snapshot.Rows = map[string]*Row{}
	}
	return out, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
