package powercut

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// abortBeforeDeadline is how long before the test binary's deadline MountT
// aborts the mount.
const abortBeforeDeadline = 20 * time.Second

// MountT mounts a power-cut filesystem for a test on new directories under
// t.TempDir() and unmounts it at cleanup (register the cleanups that stop
// processes using the mount after calling MountT, so that they run first).
// Where FUSE cannot be used (no /dev/fuse, or mounting is not permitted) it
// skips the test with one line.
func MountT(t testing.TB, opts Options) *FS {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("powercut: /dev/fuse not available: %v", err)
	}
	dir := t.TempDir()
	backing := filepath.Join(dir, "disk")
	mnt := filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pc, err := Mount(context.Background(), backing, mnt, opts)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
		t.Skipf("powercut: /dev/fuse not available: mounting is not permitted here: %v", err)
	}
	if err != nil {
		t.Fatalf("powercut: %v", err)
	}
	t.Cleanup(func() {
		if err := pc.Unmount(); err != nil {
			t.Errorf("powercut: %v", err)
		}
	})
	// A test binary that times out panics, and cannot exit while one of its
	// threads waits on the mount it serves: it would hang as a zombie.
	// Shortly before the deadline, abort the mount instead, so that file
	// operations on it fail and the test ends with a message.
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := dt.Deadline(); ok {
			timer := time.AfterFunc(time.Until(deadline)-abortBeforeDeadline, func() {
				pc.abort()
			})
			t.Cleanup(func() {
				if !timer.Stop() {
					t.Errorf("powercut: the test ran to %s before its deadline: the mount was aborted", abortBeforeDeadline)
				}
			})
		}
	}
	return pc
}
