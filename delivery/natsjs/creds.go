package natsjs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/nats-io/nkeys"

	"ticketrelay/internal/dirsync"
)

// SeedFile is the name, in the dispatcher's data directory, of the nkey seed
// the embedded nats-server admits: the one credential that opens the broker.
// It is a plain user seed, so the nats CLI takes it as it is
// (nats --nkey DATA/nats.nk ...).
const SeedFile = "nats.nk"

// ErrSeedExposed is wrapped by LoadOrCreateSeed's error for a seed file
// another user could have read or replaced.
var ErrSeedExposed = errors.New("natsjs: the broker's credential file is not private")

// LoadOrCreateSeed returns the public key of the user nkey whose seed is at
// path, creating the seed (mode 0600) if the file does not exist. The file
// is kept across restarts; it is refused if another user owns it or may
// read or write it: anyone who read it can read, purge or delete the stream.
func LoadOrCreateSeed(path string) (pub string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createSeed(path)
	}
	if err != nil {
		return "", fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	if err := checkPrivate(path); err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("natsjs: broker credentials %s: %w (delete the file: a new one is made at the next start)", path, err)
	}
	defer kp.Wipe()
	pub, err = kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("natsjs: broker credentials %s: not a user nkey seed (delete the file: a new one is made at the next start)", path)
	}
	return pub, nil
}

func createSeed(path string) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	// O_EXCL: two processes starting on one directory never each write a
	// seed of their own (the data-directory lock prevents it too).
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	_, err = f.Write(append(seed, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dirsync.Parent(path)
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	return pub, nil
}

// checkPrivate fails unless path is a regular file of this user's that no
// one else may read or write.
func checkPrivate(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("natsjs: broker credentials: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (%v)", ErrSeedExposed, path, fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int64(st.Uid) != int64(os.Getuid()) {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d)", ErrSeedExposed, path, st.Uid, os.Getuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o: others may have read it. If they could, delete it (the next start makes a new one); else chmod 600 it",
			ErrSeedExposed, path, perm)
	}
	return nil
}
