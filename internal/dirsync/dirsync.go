// Package dirsync makes directory entries durable. A file's fsync makes its
// data durable, not its name: POSIX leaves a new file, or a new directory,
// to vanish in a power cut until the directory that holds it is fsynced
// too (the model of testkit/powercut, decision 0014). ext4 happens to
// commit the entry with the file's own fsync; other filesystems need not.
package dirsync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MkdirAll creates path and any missing parents with perm, as os.MkdirAll
// does, and makes each directory it created durable by fsyncing the
// directory that holds it. A path that exists already is left as it is.
func MkdirAll(path string, perm fs.FileMode) error {
	path = filepath.Clean(path)
	var missing []string // deepest first
	for p := path; ; p = filepath.Dir(p) {
		_, err := os.Stat(p)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("dirsync: %w", err)
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := os.MkdirAll(path, perm); err != nil {
		return fmt.Errorf("dirsync: %w", err)
	}
	// A created directory's entry lives in its parent.
	for _, p := range missing {
		if err := Sync(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// Sync fsyncs the directory at path, making the entries it holds durable.
func Sync(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("dirsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("dirsync: sync directory %s: %w", path, err)
	}
	return nil
}

// Parent fsyncs the directory that holds path: call it once a file created
// at path has been synced itself.
func Parent(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("dirsync: %w", err)
	}
	return Sync(filepath.Dir(abs))
}
