package natsjs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"
)

// nats-server stages every atomic batch in a file store of its own under
// <store>/jetstream/<account>/streams/<stream>/batches/<hash>: a directory, a
// block file, fsyncs, then its removal at commit. That is most of an atomic
// publish, even on an idle disk (decision 0067 has the BenchmarkPublishBatch
// figures). The staged copy matters only while the batch commits: the server
// acknowledges a batch once its messages are in the stream's own store
// (fsynced with SyncAlways), and after a crash in the middle of a commit it
// finishes the commit from the staged copy, then deletes all staging.
// StageBatchesIn moves the staging to a memory filesystem. After a process
// crash the staged copy is still there and the server finishes the commit as
// before; after a power cut it is gone, the stream may hold the first part of
// a batch that was never acknowledged, and the relay publishes the whole batch
// again under the same message ids: the duplicate window drops what the stream
// has and stores the rest.

// DefaultStageRoot is where MemoryStageDir creates staging directories: a
// tmpfs on Linux.
const DefaultStageRoot = "/dev/shm"

// MemoryStageDir returns the staging directory for the store at storeDir
// under root, creating it (mode 0700) if needed. The name is derived from
// the store's absolute path, so a dispatcher restarted after a crash finds
// the batches it staged. It returns "" and no error when root does not
// exist (no memory filesystem: staging stays on disk), and an error when
// the directory exists but is not a private directory of this user's:
// another user may have created it first in the shared root, to read or
// plant staged batches (the caller then stages on disk).
func MemoryStageDir(root, storeDir string) (string, error) {
	return memoryStageDir(root, storeDir, os.Getuid())
}

// memoryStageDir is MemoryStageDir for the user uid.
func memoryStageDir(root, storeDir string, uid int) (string, error) {
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return "", nil
	}
	abs, err := filepath.Abs(storeDir)
	if err != nil {
		return "", fmt.Errorf("natsjs: staging directory: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(root, fmt.Sprintf("ticketrelay-batches-%d-%x", uid, sum[:8]))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("natsjs: staging directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("natsjs: staging directory: %w", err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return "", fmt.Errorf("natsjs: staging directory %s exists and is not a private directory (%v)", dir, fi.Mode())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("natsjs: staging directory %s: its owner cannot be read", dir)
	}
	if int64(st.Uid) != int64(uid) {
		return "", fmt.Errorf("natsjs: staging directory %s is owned by uid %d, not by this user (uid %d): "+
			"another user created it; not used", dir, st.Uid, uid)
	}
	return dir, nil
}

// StageBatchesIn makes the embedded server at storeDir stage the atomic
// batches of stream in dir, by replacing the stream's staging directory
// with a symbolic link to dir. Call it once the server has started (its
// recovery has finished any batch staged before a crash and deleted the
// staging directory, link included) and the stream exists, before anything
// publishes. It empties dir of what an earlier run left there.
func StageBatchesIn(storeDir, stream, dir string) error {
	streamDir := filepath.Join(storeDir, "jetstream", server.DEFAULT_GLOBAL_ACCOUNT, "streams", stream)
	if fi, err := os.Stat(streamDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("natsjs: no stream directory %s (has nats-server's store layout changed?)", streamDir)
	}
	dir, err := filepath.Abs(dir) // a link's relative target would be relative to the link
	if err != nil {
		return fmt.Errorf("natsjs: staging directory: %w", err)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("natsjs: staging directory: %w", err)
	}
	for _, e := range left {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("natsjs: staging directory: %w", err)
		}
	}
	link := filepath.Join(streamDir, "batches")
	if err := os.RemoveAll(link); err != nil {
		return fmt.Errorf("natsjs: staging directory: %w", err)
	}
	if err := os.Symlink(dir, link); err != nil {
		return fmt.Errorf("natsjs: staging directory: %w", err)
	}
	return nil
}
