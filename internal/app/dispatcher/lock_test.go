package dispatcher

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q (%v), want the pid %d", b, err, os.Getpid())
	}
	if _, err := lockDataDir(dir); err == nil {
		t.Fatal("a held lock was taken twice")
	}
	unlock()
	unlock2, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	unlock2()
	if _, err := lockDataDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("locked a directory that does not exist")
	}
}
