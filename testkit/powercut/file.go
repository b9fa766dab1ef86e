package powercut

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// pageSize is the unit of the overlay: a page written since the last sync is
// held whole in memory, so a read never has to merge partial pages.
const pageSize = 4096

// fileState is one file's contents as the processes on the mount see them:
// the backing file holds exactly what was durable at the file's last
// fsync/fdatasync, and the overlay holds everything written or truncated
// since. It is kept per inode, not per open handle, and outlives the handles
// (a write that was never synced is still there after close, until a cut).
//
// Invariants, under mu:
//   - base <= size and base <= durable: backing bytes below base are still
//     the file's contents; backing bytes at or above base were cut off by a
//     truncate since the last sync and read as zeros unless a page overlays
//     them.
//   - a page in pages is the whole current content of that page; its bytes
//     at or beyond size are zero.
type fileState struct {
	mu       sync.Mutex
	ino      uint64
	fd       *os.File // the backing file, read-write
	size     int64    // the size the processes see
	base     int64
	durable  int64            // the backing file's size: the size at the last sync
	pages    map[int64][]byte // page index → contents, written since the last sync
	unsynced int64            // bytes written, cut off or added by truncates since the last sync
	handles  int              // open handles; guarded by FS.mu, not mu
}

func newFileState(ino uint64, fd *os.File) (*fileState, error) {
	fi, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("powercut: stat %s: %w", fd.Name(), err)
	}
	n := fi.Size()
	return &fileState{ino: ino, fd: fd, size: n, base: n, durable: n, pages: map[int64][]byte{}}, nil
}

// dirty reports whether anything was written or truncated since the last sync.
func (f *fileState) dirty() bool {
	return len(f.pages) > 0 || f.base != f.durable || f.size != f.durable
}

// fill reads the current contents of [off, off+len(dst)) that no page
// overlays: backing bytes below base, zeros from there on. Caller holds mu.
func (f *fileState) fill(dst []byte, off int64) error {
	clear(dst)
	if off >= f.base {
		return nil
	}
	n := min(int64(len(dst)), f.base-off)
	if _, err := f.fd.ReadAt(dst[:n], off); err != nil && err != io.EOF {
		return fmt.Errorf("powercut: read backing %s: %w", f.fd.Name(), err)
	}
	return nil
}

// read copies the contents at off into dst and returns how many bytes there
// were (fewer than len(dst) at the end of the file).
func (f *fileState) read(dst []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= f.size {
		return 0, nil
	}
	dst = dst[:min(int64(len(dst)), f.size-off)]
	for done := 0; done < len(dst); {
		pos := off + int64(done)
		idx := pos / pageSize
		in := pos % pageSize
		if p, ok := f.pages[idx]; ok {
			done += copy(dst[done:], p[in:])
			continue
		}
		// A run of pages the overlay does not hold: one read.
		end := done + int(pageSize-in)
		for end < len(dst) {
			if _, ok := f.pages[(off+int64(end))/pageSize]; ok {
				break
			}
			end += pageSize
		}
		end = min(end, len(dst))
		if err := f.fill(dst[done:end], pos); err != nil {
			return 0, err
		}
		done = end
	}
	return len(dst), nil
}

// page returns the overlay page idx, loading it from the current contents
// the first time it is written. Caller holds mu.
func (f *fileState) page(idx int64) ([]byte, error) {
	if p, ok := f.pages[idx]; ok {
		return p, nil
	}
	p := make([]byte, pageSize)
	start := idx * pageSize
	if start < f.size {
		if err := f.fill(p[:min(pageSize, f.size-start)], start); err != nil {
			return nil, err
		}
	}
	f.pages[idx] = p
	return p, nil
}

// write puts data at off into the overlay, growing the file if needed.
func (f *fileState) write(data []byte, off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for done := 0; done < len(data); {
		pos := off + int64(done)
		p, err := f.page(pos / pageSize)
		if err != nil {
			return err
		}
		done += copy(p[pos%pageSize:], data[done:])
	}
	f.size = max(f.size, off+int64(len(data)))
	f.unsynced += int64(len(data))
	return nil
}

// truncate sets the size. What is cut off stays in the backing file (it may
// be the durable contents) but reads as zeros from now on.
func (f *fileState) truncate(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.truncateLocked(n)
}

// grow extends the file to n bytes if it is shorter (fallocate).
func (f *fileState) grow(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > f.size {
		f.truncateLocked(n)
	}
}

func (f *fileState) truncateLocked(n int64) {
	if n < f.size {
		for idx, p := range f.pages {
			switch start := idx * pageSize; {
			case start >= n:
				delete(f.pages, idx)
			case start+pageSize > n:
				clear(p[n-start:])
			}
		}
		f.base = min(f.base, n)
	}
	if n != f.size {
		f.unsynced += max(n-f.size, f.size-n)
	}
	f.size = n
}

// sync makes the current contents durable: the backing file becomes exactly
// what the processes see. The backing file is not fsynced itself: the power
// cut is simulated, the host's page cache is never lost.
func (f *fileState) sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirty() {
		return nil
	}
	if f.base < f.durable {
		if err := f.fd.Truncate(f.base); err != nil {
			return fmt.Errorf("powercut: truncate backing %s: %w", f.fd.Name(), err)
		}
	}
	idxs := make([]int64, 0, len(f.pages))
	for idx := range f.pages {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	for _, idx := range idxs {
		start := idx * pageSize
		if start >= f.size {
			continue
		}
		if _, err := f.fd.WriteAt(f.pages[idx][:min(pageSize, f.size-start)], start); err != nil {
			return fmt.Errorf("powercut: write backing %s: %w", f.fd.Name(), err)
		}
	}
	if err := f.fd.Truncate(f.size); err != nil {
		return fmt.Errorf("powercut: size backing %s: %w", f.fd.Name(), err)
	}
	f.durable, f.base, f.unsynced = f.size, f.size, 0
	clear(f.pages)
	return nil
}

// sizeNow is the size the processes see.
func (f *fileState) sizeNow() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}
