package powercut

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one file or directory of the mount. It holds no state of its own:
// the kernel may forget a node while its file still has unsynced data, so
// that data lives in FS.files, keyed by the backing inode number.
type node struct {
	fs.Inode
	pc *FS
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
)

// path is the node's path in the backing directory.
func (n *node) path() string {
	return filepath.Join(n.pc.backing, n.Path(n.Root()))
}

// statx stats path (relative to dirfd), not following a symlink, and
// returns a generation number for the inode: its birth time, so that a
// backing inode number reused by a new file is a new node to the kernel.
func statx(dirfd int, path string, flags int) (syscall.Stat_t, uint64, error) {
	var x unix.Statx_t
	if err := unix.Statx(dirfd, path, flags|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		return syscall.Stat_t{}, 0, err
	}
	st := syscall.Stat_t{
		Dev:     unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:     x.Ino,
		Nlink:   uint64(x.Nlink),
		Mode:    uint32(x.Mode),
		Uid:     x.Uid,
		Gid:     x.Gid,
		Rdev:    unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:    int64(x.Size),
		Blksize: int64(x.Blksize),
		Blocks:  int64(x.Blocks),
		Atim:    syscall.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim:    syscall.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim:    syscall.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
	gen := uint64(1)
	if x.Mask&unix.STATX_BTIME != 0 && (x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return st, gen, nil
}

func lstat(path string) (syscall.Stat_t, uint64, error) { return statx(unix.AT_FDCWD, path, 0) }

func fstat(f *os.File) (syscall.Stat_t, error) {
	st, _, err := statx(int(f.Fd()), "", unix.AT_EMPTY_PATH)
	return st, err
}

func isDir(st *syscall.Stat_t) bool { return st.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// attrLocked fills out from st, with the size the processes see if the
// file has unsynced changes. Caller holds pc.mu.
func (pc *FS) attrLocked(st *syscall.Stat_t, out *fuse.Attr) {
	out.FromStat(st)
	if f := pc.files[st.Ino]; f != nil && !isDir(st) {
		size := f.sizeNow()
		out.Size = uint64(size)
		out.Blocks = uint64((size + 511) / 512)
	}
}

func (pc *FS) attr(st *syscall.Stat_t, out *fuse.Attr) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.attrLocked(st, out)
}

func (n *node) child(ctx context.Context, st *syscall.Stat_t, gen uint64) *fs.Inode {
	return n.NewInode(ctx, &node{pc: n.pc}, fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino, Gen: gen})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	st, gen, err := lstat(filepath.Join(n.path(), name))
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	n.pc.attr(&st, &out.Attr)
	return n.child(ctx, &st, gen), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	var err error
	if h, ok := f.(*handle); ok {
		st, err = fstat(h.st.fd)
	} else {
		st, _, err = lstat(n.path())
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	n.pc.attr(&st, &out.Attr)
	return 0
}

// stateLocked returns the file's state, opening the backing file if no
// handle has it open. Caller holds pc.mu.
func (pc *FS) stateLocked(ino uint64, path string) (*fileState, syscall.Errno) {
	if f := pc.files[ino]; f != nil {
		return f, 0
	}
	fd, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	st, err := fstat(fd)
	if err != nil || st.Ino != ino {
		// The name now names another file: the node is stale.
		fd.Close()
		return nil, syscall.ESTALE
	}
	f, err := newFileState(ino, fd)
	if err != nil {
		fd.Close()
		return nil, syscall.EIO
	}
	pc.files[ino] = f
	return f, 0
}

// releaseLocked lets go of a file's state once no handle has it open and
// it has nothing unsynced, or no name can reach it any more. Caller holds
// pc.mu.
func (pc *FS) releaseLocked(f *fileState) {
	if f.handles > 0 || pc.files[f.ino] != f {
		return
	}
	if f.dirty() {
		st, err := fstat(f.fd)
		if err != nil || st.Nlink > 0 {
			return
		}
	}
	f.fd.Close()
	delete(pc.files, f.ino)
}

func (pc *FS) releaseIno(ino uint64) {
	if f := pc.files[ino]; f != nil {
		pc.releaseLocked(f)
	}
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	pc := n.pc
	p := n.path()
	var fst *fileState
	if h, ok := f.(*handle); ok {
		fst = h.st
	}
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		suid, sgid := -1, -1
		if uok {
			suid = int(uid)
		}
		if gok {
			sgid = int(gid)
		}
		if err := unix.Fchownat(unix.AT_FDCWD, p, suid, sgid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if n.IsDir() {
			return syscall.EISDIR
		}
		pc.mu.Lock()
		if fst == nil {
			var errno syscall.Errno
			if fst, errno = pc.stateLocked(n.StableAttr().Ino, p); errno != 0 {
				pc.mu.Unlock()
				return errno
			}
		}
		fst.truncate(int64(sz))
		pc.releaseLocked(fst)
		pc.mu.Unlock()
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		var err error
		if aok {
			if ts[0], err = unix.TimeToTimespec(atime); err != nil {
				return fs.ToErrno(err)
			}
		}
		if mok {
			if ts[1], err = unix.TimeToTimespec(mtime); err != nil {
				return fs.ToErrno(err)
			}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	return n.Getattr(ctx, f, out)
}

// openFlags keeps the kernel's page cache of a file across opens: every
// change goes through this mount, so the cache is never stale, and a cut
// remounts, which drops it. (No FOPEN_DIRECT_IO: SQLite maps its -shm file.)
const openFlags = fuse.FOPEN_KEEP_CACHE

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	f, errno := pc.stateLocked(n.StableAttr().Ino, n.path())
	if errno != 0 {
		return nil, 0, errno
	}
	f.handles++
	if flags&syscall.O_TRUNC != 0 {
		f.truncate(0)
	}
	return &handle{pc: pc, st: f, sync: flags&syscall.O_DSYNC != 0}, openFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p := filepath.Join(n.path(), name)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW|int(flags&syscall.O_EXCL), mode&0o7777)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	file := os.NewFile(uintptr(fd), p)
	st, gen, err := statx(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		file.Close()
		return nil, nil, 0, fs.ToErrno(err)
	}
	f := pc.files[st.Ino]
	if f == nil {
		if f, err = newFileState(st.Ino, file); err != nil {
			file.Close()
			return nil, nil, 0, syscall.EIO
		}
		pc.files[st.Ino] = f
	} else {
		file.Close()
	}
	f.handles++
	if flags&syscall.O_TRUNC != 0 {
		f.truncate(0)
	}
	pc.attrLocked(&st, &out.Attr)
	return n.child(ctx, &st, gen), &handle{pc: pc, st: f, sync: flags&syscall.O_DSYNC != 0}, openFlags, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p := filepath.Join(n.path(), name)
	if err := syscall.Mkdir(p, mode&0o7777); err != nil {
		return nil, fs.ToErrno(err)
	}
	st, gen, err := lstat(p)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	pc.attrLocked(&st, &out.Attr)
	return n.child(ctx, &st, gen), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p := filepath.Join(n.path(), name)
	if err := syscall.Symlink(target, p); err != nil {
		return nil, fs.ToErrno(err)
	}
	st, gen, err := lstat(p)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	pc.attrLocked(&st, &out.Attr)
	return n.child(ctx, &st, gen), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p := filepath.Join(n.path(), name)
	if err := syscall.Link(t.path(), p); err != nil {
		return nil, fs.ToErrno(err)
	}
	st, gen, err := lstat(p)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	pc.attrLocked(&st, &out.Attr)
	return n.child(ctx, &st, gen), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := os.Readlink(n.path())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return []byte(s), 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	return fs.NewLoopbackDirStream(n.path())
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p := filepath.Join(n.path(), name)
	st, _, err := lstat(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if isDir(&st) {
		return syscall.EISDIR
	}
	if pc.ns != nil {
		if err := pc.ns.keepFile(p, st.Ino); err != nil {
			return syscall.EIO
		}
	}
	if err := syscall.Unlink(p); err != nil {
		return fs.ToErrno(err)
	}
	pc.releaseIno(st.Ino)
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p := filepath.Join(n.path(), name)
	if pc.ns == nil {
		return fs.ToErrno(syscall.Rmdir(p))
	}
	st, _, err := lstat(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if !isDir(&st) {
		return syscall.ENOTDIR
	}
	return fs.ToErrno(pc.ns.removeDir(p, st.Ino))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		return syscall.EINVAL
	}
	pc := n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	src := filepath.Join(n.path(), name)
	dst := filepath.Join(np.path(), newName)
	sst, _, err := lstat(src)
	if err != nil {
		return fs.ToErrno(err)
	}
	// A rename over an existing name removes that name (only without
	// flags: NOREPLACE fails instead, EXCHANGE keeps both).
	var victim *syscall.Stat_t
	if vst, _, err := lstat(dst); err == nil && flags == 0 && vst.Ino != sst.Ino {
		victim = &vst
	}
	if victim != nil && pc.ns != nil {
		switch vdir, sdir := isDir(victim), isDir(&sst); {
		case vdir && !sdir:
			return syscall.EISDIR
		case !vdir && sdir:
			return syscall.ENOTDIR
		case vdir:
			if strings.HasPrefix(dst, src+"/") {
				return syscall.EINVAL
			}
			// Checked everything the rename itself could refuse:
			// take the victim away first (kept if durable).
			if err := pc.ns.removeDir(dst, victim.Ino); err != nil {
				return fs.ToErrno(err)
			}
		default:
			if err := pc.ns.keepFile(dst, victim.Ino); err != nil {
				return syscall.EIO
			}
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, uint(flags)); err != nil {
		return fs.ToErrno(err)
	}
	if victim != nil && !isDir(victim) {
		pc.releaseIno(victim.Ino)
	}
	return 0
}

// Fsync is fsync and fdatasync of a file (both make all its data durable)
// and fsync of a directory (which makes its present entries durable).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	pc := n.pc
	if n.IsDir() {
		pc.dirSyncs.Add(1)
		if pc.ns == nil {
			return 0
		}
		pc.mu.Lock()
		defer pc.mu.Unlock()
		ino, l, err := listDir(n.path())
		if err != nil {
			return syscall.EIO
		}
		if ino != n.StableAttr().Ino {
			// A rename moved the directory and the kernel's tree
			// is not updated yet.
			return syscall.EAGAIN
		}
		if err := pc.ns.commit(ino, l); err != nil {
			return syscall.EIO
		}
		return 0
	}
	pc.fileSyncs.Add(1)
	var st *fileState
	if h, ok := f.(*handle); ok {
		st = h.st
	} else {
		pc.mu.Lock()
		st = pc.files[n.StableAttr().Ino]
		pc.mu.Unlock()
	}
	if st == nil {
		return 0 // nothing unsynced: no state is kept for a clean file without handles
	}
	if err := st.sync(); err != nil {
		return syscall.EIO
	}
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.pc.backing, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

// handle is an open file: every handle of a file shares its state.
type handle struct {
	pc   *FS
	st   *fileState
	sync bool // opened O_SYNC or O_DSYNC: each write is synced
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.st.read(dest, off)
	if err != nil {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.st.write(data, off); err != nil {
		return 0, syscall.EIO
	}
	if h.sync {
		h.pc.fileSyncs.Add(1)
		if err := h.st.sync(); err != nil {
			return 0, syscall.EIO
		}
	}
	return uint32(len(data)), 0
}

func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.pc.mu.Lock()
	defer h.pc.mu.Unlock()
	h.st.handles--
	h.pc.releaseLocked(h.st)
	return 0
}

// Allocate supports what a database asks of fallocate: reserving space,
// with or without growing the file. Punching holes and the other modes are
// refused with EOPNOTSUPP, as by filesystems that lack them.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	switch mode {
	case 0:
		h.st.grow(int64(off + size))
		return 0
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	default:
		return syscall.EOPNOTSUPP
	}
}
