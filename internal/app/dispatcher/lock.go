package dispatcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"ticketrelay/internal/app"
)

// lockFile is the file in the data directory a running dispatcher holds an
// exclusive lock on; it contains the holder's pid and, on a second line, its
// relay lease holder id.
const lockFile = "dispatcher.lock"

// lockDataDir takes an exclusive, non-blocking flock on dir/dispatcher.lock
// and writes the process's pid into it. The lock lasts until unlock is
// called or the process ends (a crash included: the OS drops it). If
// another process holds it, the error is app.ErrDataInUse and names the
// directory and, when the file says, the holder's pid.
//
// predecessor is the lease holder id the file names from the dispatcher
// that ran on dir before: it is dead (its lock was free), so a relay lease
// it still holds need not be waited out.
func lockDataDir(dir, holder string) (unlock func(), predecessor string, err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("data directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another dispatcher"
			if b, _ := io.ReadAll(io.LimitReader(f, 512)); len(b) > 0 {
				first, _, _ := strings.Cut(string(b), "\n")
				if pid, perr := strconv.Atoi(strings.TrimSpace(first)); perr == nil && pid > 0 {
					holder = fmt.Sprintf("another dispatcher (pid %d)", pid)
				}
			}
			return nil, "", fmt.Errorf("%w: %s: %s holds the lock on %s; stop it first, or give this one another -data directory",
				app.ErrDataInUse, dir, holder, path)
		}
		return nil, "", fmt.Errorf("data directory lock %s: %w", path, err)
	}
	if b, _ := io.ReadAll(io.LimitReader(f, 512)); len(b) > 0 {
		_, rest, _ := strings.Cut(string(b), "\n")
		predecessor, _, _ = strings.Cut(rest, "\n")
		predecessor = strings.TrimSpace(predecessor)
	}
	// The pid is for the message above only: the lock is the flock.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"+holder+"\n"), 0)
	}
	return func() { f.Close() }, predecessor, nil
}
