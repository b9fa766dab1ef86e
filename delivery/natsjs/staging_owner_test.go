package natsjs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A staging directory another user created first in the shared root (with
// the right name and mode) is not used: its owner could read or plant
// staged batches.
func TestMemoryStageDirRefusesAnotherUsersDirectory(t *testing.T) {
	root := t.TempDir()
	// The directory the user uid+1 would use, created by this process's
	// user: to that user it belongs to someone else.
	uid := os.Getuid() + 1
	dir, err := memoryStageDir(root, "data/nats", os.Getuid())
	if err != nil || dir == "" {
		t.Fatalf("own directory: %q, %v", dir, err)
	}
	planted := strings.Replace(dir, "-batches-"+strconv.Itoa(os.Getuid())+"-", "-batches-"+strconv.Itoa(uid)+"-", 1)
	if planted == dir {
		t.Fatalf("the directory name %s does not hold the uid", dir)
	}
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := memoryStageDir(root, "data/nats", uid)
	if err == nil || got != "" {
		t.Fatalf("a directory owned by uid %d was taken for uid %d: %q, %v", os.Getuid(), uid, got, err)
	}
	if !strings.Contains(err.Error(), "owned by uid") || !strings.Contains(err.Error(), planted) {
		t.Errorf("the error does not say who owns which directory: %v", err)
	}

	// For real, where this process may hand a directory to another user.
	if os.Getuid() != 0 {
		t.Log("not root: the chown case is covered by the uid seam above only")
		return
	}
	const nobody = 65534
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	got, err = MemoryStageDir(root, "data/nats")
	if err == nil || got != "" || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("a directory owned by uid %d was used: %q, %v", nobody, got, err)
	}
	if filepath.Dir(dir) != root {
		t.Fatalf("%s is not under %s", dir, root)
	}
}
