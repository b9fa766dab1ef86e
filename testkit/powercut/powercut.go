// Package powercut is a test filesystem that can simulate a power cut, in the
// manner of LazyFS: a FUSE mount that passes every operation through to a
// backing directory but keeps what has not been made durable, and on Cut
// reverts the tree to what a machine that lost power would find on its disk.
//
// The durability model (docs/decisions/0014-powercut-durability-model.md):
//
//   - A file's data is durable up to its last fsync or fdatasync (through any
//     handle). What was written or truncated since lives only in an in-memory
//     overlay; a cut drops it.
//   - A directory's entries are durable as they were at the directory's last
//     fsync. A file created, renamed in or out, or removed since, in a
//     directory that was not fsynced since, is undone by a cut: after the cut
//     the tree is rebuilt from the root out of each directory's durable
//     entries. Options.KeepUnsyncedEntries turns this rule off (entries are
//     then durable at once and a cut reverts only data).
//   - Everything else (modes, owners, times) is durable at once.
//
// The contract of Cut: every process that has a file open on the mount, or a
// file of it mapped, has been stopped first (SIGKILL is the point). Cut
// unmounts the filesystem, which the kernel refuses while anything is still
// open; Cut then returns an error wrapping ErrBusy and changes nothing.
// After a successful Cut the same mountpoint serves the reverted tree, with
// the kernel's caches of the old one gone, as after a reboot.
//
// The process that serves the mount (the test) may use it through system
// calls, but must not map a file of it: a page fault on the mount is not a
// system call to the Go runtime, so a goroutine blocked in one cannot be
// stopped for a garbage collection, and the collection then waits for it
// while the goroutines that would answer the fault wait for the
// collection. Run whatever maps files (SQLite, for its -shm file) in a
// child process.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrBusy is wrapped by Cut's error when the mount is still in use.
var ErrBusy = errors.New("powercut: files on the mount are still open (stop every process using it first)")

// Options configure a mount.
type Options struct {
	// KeepUnsyncedEntries makes every directory entry durable at once, so
	// that a cut reverts only file data. By default a cut undoes entries
	// created, renamed or removed in a directory that was not fsynced since.
	KeepUnsyncedEntries bool
	// Debug logs every FUSE request to stderr.
	Debug bool
}

// CutStats says what one cut threw away.
type CutStats struct {
	// FilesReverted counts files that had data written or truncated since
	// their last sync.
	FilesReverted int
	// BytesDropped adds up, over those files, the bytes written, cut off by
	// a truncate or added by one since the file's last sync.
	BytesDropped int64
	// EntriesUndone counts directory entries (parent, name, inode) that were
	// on the mount before the cut and not after, or after and not before: a
	// file whose creation was undone counts 1, an undone rename 2.
	EntriesUndone int
	// Undone lists those entries as paths under the mount, sorted (at most
	// 100): "-path" an entry the cut removed, "+path" one it brought back.
	Undone []string
}

// Stats are the counters of a mount, over its whole life.
type Stats struct {
	FileSyncs int64 // fsync and fdatasync of files
	DirSyncs  int64 // fsync of directories
	Cuts      int64
	LastCut   CutStats
}

// FS is a mounted power-cut filesystem.
type FS struct {
	backing, mountpoint string
	trash, staging      string // siblings of backing, same filesystem
	opts                Options

	life   sync.Mutex // Cut and Unmount, one at a time
	server *fuse.Server
	closed bool

	mu    sync.Mutex // namespace operations and the maps below
	files map[uint64]*fileState
	ns    *namespace // nil with KeepUnsyncedEntries

	fileSyncs, dirSyncs, cuts atomic.Int64
	lastCut                   CutStats // guarded by life
}

// Mount serves backing at mountpoint. Everything in backing when it is
// mounted counts as durable. backing's parent directory must be writable
// and on the same filesystem as backing: the inodes whose last name was
// removed but which a directory's durable entries still name are kept
// there (in a hidden sibling) until a cut or a directory sync lets them go.
func Mount(ctx context.Context, backing, mountpoint string, opts Options) (*FS, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("powercut: backing %s: %w", backing, err)
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("powercut: mountpoint %s: %w", mountpoint, err)
	}
	var bst, tst syscall.Stat_t
	if err := syscall.Stat(backing, &bst); err != nil {
		return nil, fmt.Errorf("powercut: backing: %w", err)
	}
	if bst.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("powercut: backing %s is not a directory", backing)
	}
	pc := &FS{
		backing:    backing,
		mountpoint: mountpoint,
		trash:      filepath.Join(filepath.Dir(backing), "."+filepath.Base(backing)+".powercut-trash"),
		staging:    filepath.Join(filepath.Dir(backing), "."+filepath.Base(backing)+".powercut-cut"),
		opts:       opts,
		files:      map[uint64]*fileState{},
	}
	// Left over from a run that died: nothing in them is needed.
	for _, d := range []string{pc.trash, pc.staging} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("powercut: clear %s: %w", d, err)
		}
	}
	if err := os.Mkdir(pc.trash, 0o700); err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	if err := syscall.Stat(pc.trash, &tst); err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	if tst.Dev != bst.Dev {
		os.Remove(pc.trash)
		return nil, fmt.Errorf("powercut: %s is a mount point: its parent must be on the same filesystem", backing)
	}
	if !opts.KeepUnsyncedEntries {
		if pc.ns, err = scanNamespace(backing, pc.trash); err != nil {
			os.Remove(pc.trash)
			return nil, err
		}
	}
	if err := pc.mount(); err != nil {
		os.Remove(pc.trash)
		return nil, err
	}
	return pc, nil
}

func (pc *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(pc.backing, &st); err != nil {
		return fmt.Errorf("powercut: backing: %w", err)
	}
	// Entries and attributes may be cached: every change goes through this
	// mount, and a cut remounts, which drops the kernel's caches.
	timeout := time.Second
	root := &node{pc: pc}
	server, err := fs.Mount(pc.mountpoint, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:            "powercut",
			Name:              "powercut",
			DirectMountStrict: true, // no fusermount helper: mount(2) as root
			// No xattrs: otherwise the kernel asks for
			// security.capability before every write.
			DisableXAttrs: true,
			// POSIX and flock locks stay with the kernel (EnableLocks
			// off): it arbitrates them between the processes on this
			// mount, which is all SQLite needs.
			Debug:      pc.opts.Debug,
			MaxWrite:   1 << 20,
			AllowOther: false,
		},
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		RootStableAttr:  &fs.StableAttr{Ino: st.Ino, Gen: 1},
		NullPermissions: true,
	})
	if err != nil {
		return fmt.Errorf("powercut: mount %s on %s: %w", pc.backing, pc.mountpoint, err)
	}
	pc.server = server
	return nil
}

// Mountpoint is where the filesystem is mounted.
func (pc *FS) Mountpoint() string { return pc.mountpoint }

// Backing is the directory that holds the durable state.
func (pc *FS) Backing() string { return pc.backing }

// Stats returns the counters.
func (pc *FS) Stats() Stats {
	pc.life.Lock()
	last := pc.lastCut
	pc.life.Unlock()
	return Stats{
		FileSyncs: pc.fileSyncs.Load(),
		DirSyncs:  pc.dirSyncs.Load(),
		Cuts:      pc.cuts.Load(),
		LastCut:   last,
	}
}

// Cut simulates a power cut: it unmounts the filesystem, drops every write
// and truncate not followed by a sync of its file, undoes every directory
// entry change not followed by a sync of its directory (unless
// KeepUnsyncedEntries), and mounts the result again at the same place.
// Every process using the mount must have been stopped first; if one has
// not, the kernel refuses the unmount and Cut returns an error wrapping
// ErrBusy, with nothing changed.
func (pc *FS) Cut() error {
	pc.life.Lock()
	defer pc.life.Unlock()
	if pc.closed {
		return errors.New("powercut: cut after unmount")
	}
	if err := pc.server.Unmount(); err != nil {
		return fmt.Errorf("%w: unmount %s: %w", ErrBusy, pc.mountpoint, err)
	}
	// The server has stopped: nothing else touches the state now.
	var cs CutStats
	for _, f := range pc.files {
		if f.dirty() {
			cs.FilesReverted++
			cs.BytesDropped += f.unsynced
		}
		f.fd.Close()
	}
	clear(pc.files)
	if pc.ns != nil {
		undone, err := pc.ns.rebuild(pc.backing, pc.staging)
		if err != nil {
			pc.closed = true
			return fmt.Errorf("powercut: cut: %w", err)
		}
		cs.EntriesUndone = len(undone)
		cs.Undone = undone[:min(len(undone), 100)]
		if pc.ns, err = scanNamespace(pc.backing, pc.trash); err != nil {
			pc.closed = true
			return fmt.Errorf("powercut: cut: %w", err)
		}
	}
	pc.lastCut = cs
	pc.cuts.Add(1)
	if err := pc.mount(); err != nil {
		pc.closed = true
		return fmt.Errorf("powercut: remount after cut: %w", err)
	}
	return nil
}

// Unmount is a clean shutdown: it unmounts the filesystem and writes what
// was not synced to the backing directory, as an orderly unmount of a real
// filesystem does. If the kernel refuses the unmount (a file still open) it
// aborts the connection and detaches the mount, so that a failed test does
// not leave it behind or hang on it, and returns the refusal.
func (pc *FS) Unmount() error {
	pc.life.Lock()
	defer pc.life.Unlock()
	if pc.closed {
		return nil
	}
	pc.closed = true
	if err := pc.server.Unmount(); err != nil {
		if derr := pc.abort(); derr != nil {
			return fmt.Errorf("powercut: unmount %s: %w (forced lazy unmount: %v)", pc.mountpoint, err, derr)
		}
		return fmt.Errorf("powercut: unmount %s: %w (aborted and detached)", pc.mountpoint, err)
	}
	var errs []error
	for _, f := range pc.files {
		if err := f.sync(); err != nil {
			errs = append(errs, err)
		}
		f.fd.Close()
	}
	clear(pc.files)
	if err := os.RemoveAll(pc.trash); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// abort ends the FUSE connection and detaches the mount, whatever is open:
// a process blocked on the mount gets an error instead of waiting forever.
// That matters most for the process serving the mount, which cannot exit
// while one of its own threads waits on it.
func (pc *FS) abort() error {
	return syscall.Unmount(pc.mountpoint, syscall.MNT_FORCE|syscall.MNT_DETACH)
}
