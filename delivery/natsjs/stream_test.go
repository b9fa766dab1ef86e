package natsjs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
)

// The TICKETS stream: its configuration, how EnsureStream creates and
// updates it, and the size of its message blocks.

func TestStreamConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  natsjs.StreamConfig
		ok   bool
	}{
		{"defaults", natsjs.StreamConfig{}.WithDefaults(), true},
		{"window of exactly 30m", natsjs.StreamConfig{Duplicates: 30 * time.Minute, MaxAge: 30 * time.Minute}, true},
		{"window of 2h, age 1d", natsjs.StreamConfig{Duplicates: 2 * time.Hour, MaxAge: 24 * time.Hour}, true},
		{"window just under 30m", natsjs.StreamConfig{Duplicates: 30*time.Minute - time.Second, MaxAge: time.Hour}, false},
		{"window of 2m (the JetStream default)", natsjs.StreamConfig{Duplicates: 2 * time.Minute, MaxAge: time.Hour}, false},
		{"no window", natsjs.StreamConfig{MaxAge: time.Hour}, false},
		{"max age shorter than the window", natsjs.StreamConfig{Duplicates: time.Hour, MaxAge: 59 * time.Minute}, false},
		{"default window, max age 10m", natsjs.StreamConfig{MaxAge: 10 * time.Minute}.WithDefaults(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate(%+v) = %v", tc.cfg, err)
			}
			if !tc.ok && !errors.Is(err, natsjs.ErrInvalidStream) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidStream", tc.cfg, err)
			}
		})
	}
	d := natsjs.StreamConfig{}.WithDefaults()
	if d.Name != "TICKETS" || d.Duplicates != 30*time.Minute || d.MaxAge != 7*24*time.Hour || d.Replicas != 1 {
		t.Errorf("defaults = %+v", d)
	}
}

func TestEnsureStream(t *testing.T) {
	ctx := ctxT(t)
	_, js := connect(t, start(t, t.TempDir()))

	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{Name: "BAD", Duplicates: time.Minute}); !errors.Is(err, natsjs.ErrInvalidStream) {
		t.Fatalf("EnsureStream with a 1m window = %v, want ErrInvalidStream", err)
	}
	if _, err := js.Stream(ctx, "BAD"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("an invalid configuration created a stream: %v", err)
	}

	cfg := natsjs.StreamConfig{Name: "T2", Duplicates: 45 * time.Minute, MaxAge: 2 * time.Hour}
	st, err := natsjs.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	check := func(dup time.Duration) {
		t.Helper()
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := info.Config
		if c.Name != "T2" || c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage ||
			c.Duplicates != dup || c.MaxAge != 2*time.Hour || c.Replicas != 1 ||
			!slices.Equal(c.Subjects, []string{"tickets.>"}) || c.Discard != jetstream.DiscardOld ||
			c.MaxMsgsPerSubject != natsjs.MaxMsgsPerSubject || c.MaxMsgs != -1 || c.MaxBytes != -1 {
			t.Fatalf("stream config = %+v", c)
		}
	}
	check(45 * time.Minute)
	if _, err := js.Publish(ctx, "tickets.local", []byte("kept")); err != nil {
		t.Fatal(err)
	}

	st, err = natsjs.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatalf("second EnsureStream: %v", err)
	}
	check(45 * time.Minute)
	if n := streamMsgs(t, ctx, st); n != 1 {
		t.Fatalf("stream holds %d messages after a second EnsureStream, want 1", n)
	}

	cfg.Duplicates = time.Hour
	if st, err = natsjs.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatalf("EnsureStream with a longer window: %v", err)
	}
	check(time.Hour)
}

// The stream's message blocks are 4 MB, not the 8 MB nats-server gives a
// stream without limits (EnsureStream sets a per-subject limit for it): 9 MB
// of messages fill more than two block files, none of them over 4 MB.
func TestStreamBlockSize(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	_, js := connect(t, start(t, dir))
	if _, err := natsjs.EnsureStream(ctx, js, natsjs.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub := natsjs.NewPublisher(js, natsjs.AtomicBatches(func(err error) { t.Errorf("fallback: %v", err) }))
	payload := bytes.Repeat([]byte("x"), 1000)
	for b := range 9 {
		for _, r := range pub.Publish(ctx, numbered(fmt.Sprint("b", b), 1000, payload)) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	blocks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "TICKETS", "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, b := range blocks {
		fi, err := os.Stat(b)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	if len(blocks) < 3 || slices.Max(sizes) > 4<<20 {
		t.Fatalf("block files %v, sizes %v: want 3 or more, none over 4 MB", blocks, sizes)
	}
}
