package dispatcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ticketrelay/internal/app"
)

func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	unlock, prev, err := lockDataDir(dir, "host/1/first")
	if err != nil {
		t.Fatal(err)
	}
	if prev != "" {
		t.Errorf("a fresh directory names predecessor %q", prev)
	}
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if want := fmt.Sprintf("%d\nhost/1/first\n", os.Getpid()); err != nil || string(b) != want {
		t.Errorf("lock file holds %q (%v), want %q", b, err, want)
	}
	_, _, err = lockDataDir(dir, "host/2/second")
	if err == nil {
		t.Fatal("a held lock was taken twice")
	}
	if !errors.Is(err, app.ErrDataInUse) {
		t.Errorf("refusal %q is not app.ErrDataInUse (make run names DATA= by its exit status)", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("refusal %q does not name the holder's pid", err)
	}
	unlock()
	unlock2, prev, err := lockDataDir(dir, "host/3/third")
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	if prev != "host/1/first" {
		t.Errorf("predecessor %q, want host/1/first", prev)
	}
	unlock2()
	if _, _, err := lockDataDir(filepath.Join(dir, "missing"), "h"); err == nil {
		t.Error("locked a directory that does not exist")
	}
}
