package powercut

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// dent is a directory entry: the inode it names (the backing file's inode
// number) and whether that is a directory.
type dent struct {
	ino uint64
	dir bool
}

// namespace is what the directories' syncs made durable. The backing
// directory always holds the tree as the processes see it; namespace holds,
// for each directory, its entries as they were at its last fsync (at the
// mount for a directory that existed then, none for one made since).
//
// An inode that a durable entry names must stay reachable after the
// processes remove its last name, or a cut could not bring it back: before a
// name is removed, such an inode is hard-linked (a file) or moved (an empty
// directory) into trash/<ino>, where it stays until no durable entry names
// it any more. Kept inodes cannot be freed, so inode numbers are never
// reused while namespace refers to them.
type namespace struct {
	trash   string
	rootIno uint64
	listing map[uint64]map[string]dent // directory inode → entries at its last fsync
	refs    map[uint64]int             // inode → how many durable entries name it
	trashed map[uint64]bool            // inode kept at trash/<ino>
}

// scanNamespace takes the tree under backing as durable, all of it.
func scanNamespace(backing, trash string) (*namespace, error) {
	ns := &namespace{
		trash:   trash,
		listing: map[uint64]map[string]dent{},
		refs:    map[uint64]int{},
		trashed: map[uint64]bool{},
	}
	var walk func(path string) (uint64, error)
	walk = func(path string) (uint64, error) {
		ino, l, err := listDir(path)
		if err != nil {
			return 0, err
		}
		if _, seen := ns.listing[ino]; seen {
			return 0, fmt.Errorf("powercut: directory %s seen twice (a bind mount under the backing directory?)", path)
		}
		ns.listing[ino] = l
		for name, e := range l {
			ns.refs[e.ino]++
			if e.dir {
				if _, err := walk(filepath.Join(path, name)); err != nil {
					return 0, err
				}
			}
		}
		return ino, nil
	}
	root, err := walk(backing)
	if err != nil {
		return nil, err
	}
	ns.rootIno = root
	return ns, nil
}

// listDir reads the entries of the directory at path, and its own inode.
func listDir(path string) (uint64, map[string]dent, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("powercut: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, nil, fmt.Errorf("powercut: stat %s: %w", path, err)
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0, nil, fmt.Errorf("powercut: list %s: %w", path, err)
	}
	l := make(map[string]dent, len(names))
	for _, name := range names {
		var cst unix.Stat_t
		if err := unix.Fstatat(int(f.Fd()), name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, nil, fmt.Errorf("powercut: stat %s: %w", filepath.Join(path, name), err)
		}
		l[name] = dent{ino: cst.Ino, dir: cst.Mode&unix.S_IFMT == unix.S_IFDIR}
	}
	return st.Ino, l, nil
}

func (ns *namespace) trashPath(ino uint64) string {
	return filepath.Join(ns.trash, strconv.FormatUint(ino, 10))
}

// commit makes the directory's present entries (l) its durable ones: the
// directory was fsynced.
func (ns *namespace) commit(dir uint64, l map[string]dent) error {
	old := ns.listing[dir]
	ns.listing[dir] = l
	for _, e := range l {
		ns.refs[e.ino]++
	}
	var errs []error
	for _, e := range old {
		errs = append(errs, ns.unref(e.ino))
	}
	return errors.Join(errs...)
}

// unref drops one durable entry naming ino; a kept inode named by none any
// more is let go.
func (ns *namespace) unref(ino uint64) error {
	ns.refs[ino]--
	if ns.refs[ino] > 0 {
		return nil
	}
	delete(ns.refs, ino)
	if ns.trashed[ino] {
		return ns.purge(ino)
	}
	return nil
}

// purge forgets an inode that no name of the tree reaches and no durable
// entry names: its trash copy and, for a directory, its durable entries.
func (ns *namespace) purge(ino uint64) error {
	var errs []error
	if ns.trashed[ino] {
		delete(ns.trashed, ino)
		if err := os.Remove(ns.trashPath(ino)); err != nil {
			errs = append(errs, fmt.Errorf("powercut: %w", err))
		}
	}
	l := ns.listing[ino]
	delete(ns.listing, ino)
	for _, e := range l {
		errs = append(errs, ns.unref(e.ino))
	}
	return errors.Join(errs...)
}

// keepFile is called before the name path of file ino is removed or
// replaced: if a durable entry names the file, a hard link in the trash
// keeps it.
func (ns *namespace) keepFile(path string, ino uint64) error {
	if ns.refs[ino] == 0 || ns.trashed[ino] {
		return nil
	}
	if err := os.Link(path, ns.trashPath(ino)); err != nil {
		return fmt.Errorf("powercut: keep %s: %w", path, err)
	}
	ns.trashed[ino] = true
	return nil
}

// removeDir removes the empty directory at path (ino): into the trash if a
// durable entry names it, for good otherwise.
func (ns *namespace) removeDir(path string, ino uint64) error {
	if ns.refs[ino] == 0 {
		if err := syscall.Rmdir(path); err != nil {
			return err
		}
		return ns.purge(ino)
	}
	if err := isEmptyDir(path); err != nil {
		return err
	}
	if err := syscall.Rename(path, ns.trashPath(ino)); err != nil {
		return err
	}
	ns.trashed[ino] = true
	return nil
}

func isEmptyDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	if err != nil && err != io.EOF {
		return err
	}
	return nil
}

// rebuild replaces the tree under backing with the durable one: from the
// root, each directory with the entries of its last sync, each naming the
// same inode as then (hard links: a file's data is the backing file's,
// which holds exactly what was synced). Directories are made anew. A
// directory that durable entries reach twice (possible only when a moved
// directory's old and new parents were synced at different times) is kept
// at the first place a breadth-first walk in name order finds it.
// It returns the entries (parent, name, inode) that differ between the tree
// before and after, as paths under the root: "-path" for an entry the cut
// removed, "+path" for one it brought back.
func (ns *namespace) rebuild(backing, staging string) ([]string, error) {
	type triple struct {
		parent uint64
		name   string
		ino    uint64
	}
	// Where each inode can be found now, and the tree as it is.
	where := map[uint64]string{}
	live := map[triple]string{}
	var walk func(path string) error
	walk = func(path string) error {
		dir, l, err := listDir(path)
		if err != nil {
			return err
		}
		for name, e := range l {
			p := filepath.Join(path, name)
			live[triple{dir, name, e.ino}] = p
			if _, ok := where[e.ino]; !ok {
				where[e.ino] = p
			}
			if e.dir {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(backing); err != nil {
		return nil, err
	}
	for ino := range ns.trashed {
		if _, ok := where[ino]; !ok {
			where[ino] = ns.trashPath(ino)
		}
	}

	if err := os.RemoveAll(staging); err != nil {
		return nil, fmt.Errorf("clear %s: %w", staging, err)
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return nil, err
	}
	durable := map[triple]string{}
	type item struct {
		ino uint64
		dst string
	}
	queue := []item{{ns.rootIno, staging}}
	seen := map[uint64]bool{ns.rootIno: true}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		l := ns.listing[it.ino]
		names := make([]string, 0, len(l))
		for name := range l {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			e := l[name]
			if e.dir && seen[e.ino] {
				continue
			}
			src, ok := where[e.ino]
			if !ok {
				return nil, fmt.Errorf("inode %d (%s) is named by a durable entry but can no longer be found", e.ino, name)
			}
			dst := filepath.Join(it.dst, name)
			durable[triple{it.ino, name, e.ino}] = dst
			if !e.dir {
				if err := os.Link(src, dst); err != nil {
					return nil, err
				}
				continue
			}
			fi, err := os.Lstat(src)
			if err != nil {
				return nil, err
			}
			if err := os.Mkdir(dst, 0o700); err != nil {
				return nil, err
			}
			if err := os.Chmod(dst, fi.Mode().Perm()); err != nil {
				return nil, err
			}
			seen[e.ino] = true
			queue = append(queue, item{e.ino, dst})
		}
	}
	var undone []string
	for t, p := range live {
		if _, ok := durable[t]; !ok {
			rel, _ := filepath.Rel(backing, p)
			undone = append(undone, "-"+rel)
		}
	}
	for t, p := range durable {
		if _, ok := live[t]; !ok {
			rel, _ := filepath.Rel(staging, p)
			undone = append(undone, "+"+rel)
		}
	}
	slices.Sort(undone)

	// Swap the contents; backing itself stays (it may be a directory the
	// caller holds open or watches).
	old, err := os.ReadDir(backing)
	if err != nil {
		return nil, err
	}
	for _, e := range old {
		if err := os.RemoveAll(filepath.Join(backing, e.Name())); err != nil {
			return nil, err
		}
	}
	now, err := os.ReadDir(staging)
	if err != nil {
		return nil, err
	}
	for _, e := range now {
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(backing, e.Name())); err != nil {
			return nil, err
		}
	}
	if err := os.Remove(staging); err != nil {
		return nil, err
	}
	trash, err := os.ReadDir(ns.trash)
	if err != nil {
		return nil, err
	}
	for _, e := range trash {
		if err := os.RemoveAll(filepath.Join(ns.trash, e.Name())); err != nil {
			return nil, err
		}
	}
	return undone, nil
}
