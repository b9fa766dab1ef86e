package natsjs

import (
	"fmt"
	"io/fs"
	"path/filepath"

	"ticketrelay/internal/dirsync"
)

// SyncStoreDirs fsyncs every directory of the embedded server's JetStream
// store at storeDir, storeDir itself and its parent. Call it once the
// stream exists, before anything publishes.
//
// sync_interval: always makes nats-server fsync a message block before it
// acknowledges a message, but it creates the store's directories (the
// store, jetstream/$G/streams/<stream>/{msgs,obs}) with MkdirAll and never
// fsyncs the directories that hold them, and it fsyncs msgs/ (which names
// the first block, 1.blk) only on its sync timer, every two minutes. Until
// then a power cut may lose the directory entries, and with them every
// message acknowledged since the stream was created
// (docs/decisions/0013-sync-the-jetstream-store-directories.md).
func SyncStoreDirs(storeDir string) error {
	var dirs []string
	err := filepath.WalkDir(storeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("natsjs: store directories: %w", err)
	}
	dirs = append(dirs, filepath.Dir(storeDir))
	for _, d := range dirs {
		if err := dirsync.Sync(d); err != nil {
			return fmt.Errorf("natsjs: store directories: %w", err)
		}
	}
	return nil
}
