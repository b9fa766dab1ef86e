package powercut_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ticketrelay/testkit/powercut"
)

// writeFile writes data at off in path (created if absent), without a sync.
func writeFile(t *testing.T, path string, off int64, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		t.Fatal(err)
	}
}

// fsync fsyncs the file or directory at path.
func fsync(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

// durableFile writes data to a new file at path and makes it durable: the
// file, then its directory.
func durableFile(t *testing.T, path, data string) {
	t.Helper()
	writeFile(t, path, 0, data)
	fsync(t, path)
	fsync(t, filepath.Dir(path))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantContent(t *testing.T, path, want string) {
	t.Helper()
	if got := readFile(t, path); got != want {
		t.Fatalf("%s holds %q, want %q", path, got, want)
	}
}

func wantAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: Lstat err %v, want it absent", path, err)
	}
}

func cut(t *testing.T, pc *powercut.FS) powercut.CutStats {
	t.Helper()
	if err := pc.Cut(); err != nil {
		t.Fatalf("Cut: %v", err)
	}
	return pc.Stats().LastCut
}

func TestSyncedWriteSurvives(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "f")
	durableFile(t, p, "hello, disk")
	before := pc.Stats()
	if before.FileSyncs != 1 || before.DirSyncs != 1 {
		t.Fatalf("stats %+v, want 1 file sync and 1 directory sync", before)
	}
	cs := cut(t, pc)
	wantContent(t, p, "hello, disk")
	if cs.FilesReverted != 0 || cs.BytesDropped != 0 || cs.EntriesUndone != 0 {
		t.Fatalf("a cut after everything was synced reports %+v, want nothing dropped", cs)
	}
}

func TestUnsyncedWriteLost(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "f")
	durableFile(t, p, "durable")
	writeFile(t, p, 0, "DUR")         // overwrite
	writeFile(t, p, 7000, "far away") // grow past a page, leaving a hole
	if got := readFile(t, p); got[:7] != "DURable" || len(got) != 7008 || got[7000:] != "far away" || got[7:7000] != string(make([]byte, 6993)) {
		t.Fatalf("before the cut the file reads %q…, want the writes", got[:min(len(got), 16)])
	}
	cs := cut(t, pc)
	wantContent(t, p, "durable")
	if cs.FilesReverted != 1 || cs.BytesDropped != 3+8 || cs.EntriesUndone != 0 {
		t.Fatalf("cut stats %+v, want 1 file and 11 bytes reverted", cs)
	}
}

func TestTruncateWithoutSyncUndone(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "f")
	durableFile(t, p, "0123456789")
	if err := os.Truncate(p, 3); err != nil {
		t.Fatal(err)
	}
	// Grown again, the cut-off part must read as zeros, not as the
	// durable bytes still in the backing file.
	writeFile(t, p, 6, "x")
	wantContent(t, p, "012\x00\x00\x00x")
	cut(t, pc)
	wantContent(t, p, "0123456789")

	// The same truncate, synced, stays.
	if err := os.Truncate(p, 3); err != nil {
		t.Fatal(err)
	}
	fsync(t, p)
	cut(t, pc)
	wantContent(t, p, "012")
}

func TestFdatasyncCounts(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "f")
	durableFile(t, p, "")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"one ", "two "} {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("three"); err != nil { // not synced
		t.Fatal(err)
	}
	f.Close()
	cut(t, pc)
	wantContent(t, p, "one two ")
}

func TestCreateInUnsyncedDirDisappears(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	root := pc.Mountpoint()
	p := filepath.Join(root, "new")
	writeFile(t, p, 0, "synced data")
	fsync(t, p) // the file, not its directory

	// A directory made in an unsynced parent goes with it, even though its
	// own entries were synced.
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	durableFile(t, filepath.Join(sub, "g"), "in sub")

	cs := cut(t, pc)
	wantAbsent(t, p)
	wantAbsent(t, sub)
	if cs.EntriesUndone != 3 { // new, sub, sub/g
		t.Fatalf("cut undid %d entries, want 3", cs.EntriesUndone)
	}

	// Once the directory is synced, both stay.
	writeFile(t, p, 0, "synced data")
	fsync(t, p)
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	durableFile(t, filepath.Join(sub, "g"), "in sub")
	fsync(t, root)
	cut(t, pc)
	wantContent(t, p, "synced data")
	wantContent(t, filepath.Join(sub, "g"), "in sub")
}

func TestKeepUnsyncedEntriesOption(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{KeepUnsyncedEntries: true})
	p := filepath.Join(pc.Mountpoint(), "new")
	writeFile(t, p, 0, "synced")
	fsync(t, p)
	writeFile(t, p, 6, " and not")
	writeFile(t, filepath.Join(pc.Mountpoint(), "never-synced"), 0, "gone")
	cut(t, pc)
	wantContent(t, p, "synced")
	// The entry survives, its data does not.
	wantContent(t, filepath.Join(pc.Mountpoint(), "never-synced"), "")
}

func TestRenameNeedsDirSync(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	root := pc.Mountpoint()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	durableFile(t, a, "A")

	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, a)
	cs := cut(t, pc)
	wantContent(t, a, "A")
	wantAbsent(t, b)
	if cs.EntriesUndone != 2 {
		t.Fatalf("an undone rename counts %d entries, want 2", cs.EntriesUndone)
	}

	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	fsync(t, root)
	cut(t, pc)
	wantAbsent(t, a)
	wantContent(t, b, "A")
}

// The write-a-temporary-file-then-rename-it-over pattern: without a sync of
// the directory the old file comes back, whole.
func TestRenameOverExistingUndone(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	root := pc.Mountpoint()
	tmp, meta := filepath.Join(root, "meta.tmp"), filepath.Join(root, "meta")
	durableFile(t, meta, "version 1")
	writeFile(t, tmp, 0, "version 2")
	fsync(t, tmp)
	if err := os.Rename(tmp, meta); err != nil {
		t.Fatal(err)
	}
	wantContent(t, meta, "version 2")
	cut(t, pc)
	wantContent(t, meta, "version 1")
	wantAbsent(t, tmp)

	writeFile(t, tmp, 0, "version 2")
	fsync(t, tmp)
	if err := os.Rename(tmp, meta); err != nil {
		t.Fatal(err)
	}
	fsync(t, root)
	cut(t, pc)
	wantContent(t, meta, "version 2")
}

func TestUnlinkNeedsDirSync(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	root := pc.Mountpoint()
	a := filepath.Join(root, "a")
	durableFile(t, a, "still here")
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fsync(t, root)
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	cut(t, pc)
	wantContent(t, a, "still here")
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("removed directory not restored: %v", err)
	}

	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	fsync(t, root)
	cut(t, pc)
	wantAbsent(t, a)
}

func TestCutRefusedWhileFileOpen(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "f")
	durableFile(t, p, "kept")
	writeFile(t, p, 0, "KEPT") // unsynced, must survive the refused cut
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Cut()
	f.Close()
	if !errors.Is(err, powercut.ErrBusy) {
		t.Fatalf("Cut with a file open: %v, want ErrBusy", err)
	}
	wantContent(t, p, "KEPT")
	cut(t, pc)
	wantContent(t, p, "kept")
}

// SQLite maps its -shm file; writes through a shared mapping must reach the
// filesystem and follow the same rule. The mapping is a child's (see
// childEnv).
func TestMmapWrites(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "shm")
	durableFile(t, p, string(make([]byte, 8192)))
	c := startChild(t, "mmap", "POWERCUT_FILE="+p)
	if l := c.next(t, time.Minute); l != "done" {
		t.Fatalf("mmap child: %s", l)
	}
	if err := c.wait(); err != nil {
		t.Fatalf("mmap child: %v", err)
	}
	got := readFile(t, p)
	if got[:18] != "mapped, not synced" || got[4096:4113] != "mapped and synced" {
		t.Fatalf("writes through the mapping not visible: %q / %q", got[:18], got[4096:4113])
	}
	cut(t, pc)
	got = readFile(t, p)
	if !bytes.Equal([]byte(got[:18]), make([]byte, 18)) || got[4096:4113] != "mapped and synced" {
		t.Fatalf("after the cut: %q / %q, want zeros / the synced text", got[:18], got[4096:4113])
	}
}

// childMmap maps POWERCUT_FILE, writes through the mapping, fsyncs, writes
// again and prints "done" (or the error).
func childMmap() int {
	err := func() error {
		f, err := os.OpenFile(os.Getenv("POWERCUT_FILE"), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		copy(m[4096:], "mapped and synced")
		if err := f.Sync(); err != nil { // fsync writes the dirty mapped pages first
			return err
		}
		copy(m[0:], "mapped, not synced")
		return unix.Munmap(m)
	}()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("done")
	return 0
}

// Locks are the kernel's: open file description locks taken through two
// opens of one file conflict as on any local filesystem.
func TestLocksConflict(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	p := filepath.Join(pc.Mountpoint(), "db")
	durableFile(t, p, "x")
	lock := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 1}
	f1, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, &lock); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &lock); !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("second, conflicting lock: %v, want EAGAIN", err)
	}
}
