package natsjs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/natsjs"
)

// TestStageBatchesIn: with the staging directory linked elsewhere, atomic
// batches are staged there (the directory changes and is empty again once
// they commit), every message is stored, and a restart on the same store
// keeps the messages, drops the link (the server deletes all staging at
// start) and lets it be linked again, which clears what was left.
func TestStageBatchesIn(t *testing.T) {
	ctx := ctxT(t)
	store, mem := t.TempDir(), t.TempDir()
	s, err := natsjs.StartEmbedded(natsjs.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: store}, discard())
	if err != nil {
		t.Fatal(err)
	}
	nc, js := connect(t, s)
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := natsjs.StageBatchesIn(store, "TICKETS", mem); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(store, "jetstream", "$G", "streams", "TICKETS", "batches")
	if got, err := os.Readlink(link); err != nil || got != mem {
		t.Fatalf("staging link: %q, %v; want %q", got, err, mem)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(mem, past, past); err != nil {
		t.Fatal(err)
	}

	pub := natsjs.NewPublisher(js, natsjs.AtomicBatches(func(err error) { t.Errorf("fallback to one by one: %v", err) }))
	seqs := map[uint64]bool{}
	for b := range 3 {
		for _, r := range pub.Publish(ctx, numbered(fmt.Sprint("s", b), 20, []byte("{}"))) {
			if r.Err != nil || r.Duplicate || seqs[r.Seq] {
				t.Fatalf("publish: %+v", r)
			}
			seqs[r.Seq] = true
		}
	}
	fi, err := os.Stat(mem)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().After(past) {
		t.Errorf("nothing was staged in %s (modified %v)", mem, fi.ModTime())
	}
	if left, _ := os.ReadDir(mem); len(left) != 0 {
		t.Errorf("staging left %v after every batch committed", left)
	}

	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	if err := os.WriteFile(filepath.Join(mem, "left-over"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = start(t, store)
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("after a restart the staging link is still there (%v): the server no longer deletes staging at start", err)
	}
	_, js = connect(t, s)
	st, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(seqs)) {
		t.Fatalf("after a restart the stream holds %d messages, want %d", info.State.Msgs, len(seqs))
	}
	if err := natsjs.StageBatchesIn(store, "TICKETS", mem); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(mem); len(left) != 0 {
		t.Errorf("linking again left %v in the staging directory", left)
	}
	if got, err := os.Readlink(link); err != nil || got != mem {
		t.Fatalf("staging link after the restart: %q, %v", got, err)
	}

	if err := natsjs.StageBatchesIn(store, "OTHER", mem); err == nil || !strings.Contains(err.Error(), "no stream directory") {
		t.Errorf("a stream that is not there: %v", err)
	}

	// A relative directory (-nats-stage-dir stage) is linked by its absolute path.
	t.Chdir(filepath.Dir(mem))
	if err := natsjs.StageBatchesIn(store, "TICKETS", filepath.Base(mem)); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(link); err != nil || got != mem {
		t.Fatalf("staging link to a relative directory: %q, %v; want %q", got, err, mem)
	}
}

func TestMemoryStageDir(t *testing.T) {
	root := t.TempDir()
	a, err := natsjs.MemoryStageDir(root, "data/nats")
	if err != nil || a == "" {
		t.Fatalf("MemoryStageDir: %q, %v", a, err)
	}
	fi, err := os.Lstat(a)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || filepath.Dir(a) != root {
		t.Fatalf("%s: %v, %v", a, fi.Mode(), err)
	}
	if again, err := natsjs.MemoryStageDir(root, "data/nats"); again != a || err != nil {
		t.Errorf("the same store again: %q, %v; want %q", again, err, a)
	}
	if other, err := natsjs.MemoryStageDir(root, "elsewhere/nats"); other == a || err != nil {
		t.Errorf("another store: %q, %v; want a directory other than %q", other, err, a)
	}
	if none, err := natsjs.MemoryStageDir(filepath.Join(root, "missing"), "data/nats"); none != "" || err != nil {
		t.Errorf("no memory filesystem: %q, %v; want none and no error", none, err)
	}
	if err := os.Chmod(a, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := natsjs.MemoryStageDir(root, "data/nats"); err == nil {
		t.Errorf("a directory others can read was taken: %q", got)
	}
}
