package trail

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// sinkBatch is how many entries a sink reads and writes at once.
const sinkBatch = 1000

// follow hands write every entry of store after seq, in order, in batches,
// then every new one as it comes (polled every every), until ctx ends.
// write returns once the batch is safely kept; the cursor name then
// records its last seq, so that a restart resumes after it.
func follow(ctx context.Context, store *Store, name string, seq int64, every time.Duration, write func(context.Context, []Entry) error) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			batch, err := store.Query(ctx, Filter{AfterSeq: seq, Limit: sinkBatch})
			if err != nil {
				return err
			}
			if len(batch) == 0 {
				break
			}
			if err := write(ctx, batch); err != nil {
				return err
			}
			seq = batch[len(batch)-1].Seq
			// The batch is out: its cursor is recorded even if ctx ended
			// meanwhile, or a restart after a rotation would send it again.
			if err := store.SetCursor(context.WithoutCancel(ctx), name, seq); err != nil {
				return err
			}
			if len(batch) < sinkBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// FileSink appends the trail to a file as JSON lines, for a log shipper
// to follow. One process writes it: the dispatcher.
//
// It resumes after a restart from the file itself: the last complete line
// names the last entry it holds (a line cut short by a crash is removed
// first), so nothing is lost and nothing written twice. A file that is
// empty or missing (rotated away) resumes after the cursor it recorded,
// so rotation loses nothing either. Rotation by rename is followed within
// Every: the file is reopened under its name. copytruncate works as well
// (the sink writes in append mode), with logrotate's own caveat that lines
// written between the copy and the truncation are lost.
type FileSink struct {
	Store *Store
	Path  string
	Host  string        // stamped on each line in multi-host mode; "" otherwise
	Every time.Duration // how often it looks for new entries; default 1s
	Log   *slog.Logger
}

// CursorName is the file sink's cursor of path.
func (f *FileSink) cursorName() string {
	abs, err := filepath.Abs(f.Path)
	if err != nil {
		abs = f.Path
	}
	return "file:" + abs
}

// Run follows the trail into the file until ctx ends. A file it cannot
// resume (not a trail of ours) is its error; a failure to write later
// (a full disk) is logged, and it resumes from the file again.
func (f *FileSink) Run(ctx context.Context) error {
	every := cmp.Or(f.Every, time.Second)
	for {
		seq, err := f.resume(ctx)
		if err != nil {
			return err
		}
		err = f.follow(ctx, seq, every)
		if ctx.Err() != nil {
			return nil
		}
		f.Log.Warn("audit trail file sink failed; resuming", "path", f.Path, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func (f *FileSink) follow(ctx context.Context, seq int64, every time.Duration) error {
	out, err := f.open()
	if err != nil {
		return err
	}
	defer func() { out.Close() }()
	f.Log.Info("audit trail file sink following", "path", f.Path, "after_seq", seq)
	return follow(ctx, f.Store, f.cursorName(), seq, every, func(_ context.Context, batch []Entry) error {
		if moved(out, f.Path) {
			out.Close()
			if out, err = f.open(); err != nil {
				return err
			}
			f.Log.Info("audit trail file reopened (rotated)", "path", f.Path)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		for _, e := range batch {
			e.Host = f.Host
			if err := enc.Encode(e); err != nil {
				return fmt.Errorf("trail: file sink: %w", err)
			}
		}
		if _, err := out.Write(b.Bytes()); err != nil {
			return fmt.Errorf("trail: file sink: write %s: %w", f.Path, err)
		}
		if err := out.Sync(); err != nil {
			return fmt.Errorf("trail: file sink: sync %s: %w", f.Path, err)
		}
		return nil
	})
}

func (f *FileSink) open() (*os.File, error) {
	out, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trail: file sink: %w", err)
	}
	return out, nil
}

// moved reports whether path no longer names the file out writes.
func moved(out *os.File, path string) bool {
	a, err1 := out.Stat()
	b, err2 := os.Stat(path)
	return err1 != nil || err2 != nil || !os.SameFile(a, b)
}

// resume is the seq of the last entry the file holds: its last complete
// line's, after cutting off a partial one; the cursor's for a file empty
// or missing.
func (f *FileSink) resume(ctx context.Context) (int64, error) {
	seq, err := lastLineSeq(f.Path)
	if err != nil || seq > 0 {
		return seq, err
	}
	return f.Store.Cursor(ctx, f.cursorName())
}

// lastLineSeq cuts a partial last line off the file at path and returns
// the seq of its last line; 0 for an empty or missing file.
func lastLineSeq(path string) (int64, error) {
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("trail: file sink: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return 0, fmt.Errorf("trail: file sink: %w", err)
	}
	// A line is well under 4 KiB (the fields are bounded); read the tail.
	size := st.Size()
	start := max(0, size-16<<10)
	tail := make([]byte, size-start)
	if _, err := fh.ReadAt(tail, start); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("trail: file sink: read %s: %w", path, err)
	}
	end := bytes.LastIndexByte(tail, '\n') + 1 // 0: no complete line in the tail
	if int64(end) < int64(len(tail)) {
		if err := fh.Truncate(start + int64(end)); err != nil {
			return 0, fmt.Errorf("trail: file sink: cut the partial last line of %s: %w", path, err)
		}
		if err := fh.Sync(); err != nil {
			return 0, fmt.Errorf("trail: file sink: %w", err)
		}
		tail = tail[:end]
	}
	if len(tail) == 0 {
		return 0, nil
	}
	lines := bufio.NewScanner(bytes.NewReader(tail))
	lines.Buffer(make([]byte, 0, 64<<10), 64<<10)
	var last []byte
	for lines.Scan() {
		if len(bytes.TrimSpace(lines.Bytes())) > 0 {
			last = append(last[:0], lines.Bytes()...)
		}
	}
	var e Entry
	if err := json.Unmarshal(last, &e); err != nil || e.Seq <= 0 {
		return 0, fmt.Errorf("trail: file sink: the last line of %s is no trail entry; move the file away to start a new one", path)
	}
	return e.Seq, nil
}
