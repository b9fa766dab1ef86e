package dirsync_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"ticketrelay/internal/dirsync"
	"ticketrelay/testkit/powercut"
)

// syncedFile writes data to a new file at path and fsyncs the file (not
// its directory).
func syncedFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestMkdirAllSurvivesPowerCut: a directory tree made by MkdirAll, and a
// file in it whose own entry was synced with Parent, are there after a
// power cut; the same made with os.MkdirAll is gone, as POSIX allows.
func TestMkdirAllSurvivesPowerCut(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	root := pc.Mountpoint()

	durable := filepath.Join(root, "durable", "a", "data")
	if err := dirsync.MkdirAll(durable, 0o700); err != nil {
		t.Fatal(err)
	}
	// Twice: a path that exists is no error, and nothing is created again.
	if err := dirsync.MkdirAll(durable, 0o700); err != nil {
		t.Fatalf("MkdirAll of an existing path: %v", err)
	}
	file := filepath.Join(durable, "f")
	syncedFile(t, file, "kept")
	if err := dirsync.Parent(file); err != nil {
		t.Fatal(err)
	}
	// Made after, so that no sync of the root covers it.
	plain := filepath.Join(root, "plain", "data")
	if err := os.MkdirAll(plain, 0o700); err != nil {
		t.Fatal(err)
	}
	syncedFile(t, filepath.Join(plain, "f"), "lost")

	if err := pc.Cut(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "plain")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the cut kept a directory whose parent was never synced (Lstat: %v): this test cannot tell MkdirAll from os.MkdirAll", err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	if string(b) != "kept" {
		t.Fatalf("after the cut %s holds %q, want %q", file, b, "kept")
	}
	fi, err := os.Stat(durable)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("%s has mode %v, want 0700", durable, perm)
	}
}

func TestMkdirAllRefusesAFileInTheWay(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := dirsync.MkdirAll(filepath.Join(file, "data"), 0o700); err == nil {
		t.Fatal("MkdirAll under a regular file succeeded")
	}
}
