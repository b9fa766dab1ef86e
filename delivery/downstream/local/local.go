// Package local is the built-in target used when none is configured: it
// appends one JSON line per delivered ticket to a file, and never writes the
// same dedupe key twice, so `make run` works with nothing else installed.
package local

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/internal/dirsync"
	"ticketrelay/ticket"
)

// Line is one line of the file: a ticket, a comment or an update.
type Line struct {
	Key         string        `json:"key"`
	DeliveredAt time.Time     `json:"delivered_at"`
	Ticket      ticket.Ticket `json:"ticket,omitzero"`
	Comment     *CommentLine  `json:"comment,omitempty"`
	Update      *UpdateLine   `json:"update,omitempty"`
}

// CommentLine is a comment on the ticket of another line.
type CommentLine struct {
	Ticket string `json:"ticket"` // its receipt's id: line-N
	Body   string `json:"body"`
}

// UpdateLine sets fields of the ticket of another line.
type UpdateLine struct {
	Ticket string            `json:"ticket"`
	Set    downstream.Update `json:"set"`
}

// Target appends tickets to a JSON-lines file.
type Target struct {
	name string
	path string
	url  string // file URL of the absolute path, without fragment
	now  func() time.Time

	mu   sync.Mutex
	f    *os.File
	seen map[keyID]int // key → line number (1-based)
	n    int           // lines written
	tkts bitset        // the lines that are tickets
	err  error         // a failed write or sync: the file's tail is in doubt until reopened

	syncMu sync.Mutex // one fsync at a time; it covers every line written before it
	synced int        // lines known durable (guarded by syncMu)
}

var (
	_ downstream.Target = (*Target)(nil)
	_ downstream.Finder = (*Target)(nil)
)

// Open opens (creating) the file at path and indexes the keys already in it.
// A torn last line, left by a crash in the middle of a write, is cut off.
func Open(name, path string, now func() time.Time) (*Target, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("local target: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("local target: %w", err)
	}
	t := &Target{name: name, path: path, url: fileURL(abs), now: now, f: f, seen: map[keyID]int{}}
	if err := t.index(); err != nil {
		f.Close()
		return nil, fmt.Errorf("local target %s: %w", path, err)
	}
	// Lines a crashed process wrote but never synced become durable now,
	// and so does the file's name if Open created it: its lines' fsyncs
	// keep their data, not the directory entry that finds them.
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("local target %s: %w", path, err)
	}
	if err := dirsync.Parent(abs); err != nil {
		f.Close()
		return nil, fmt.Errorf("local target %s: %w", path, err)
	}
	t.synced = t.n
	return t, nil
}

func (t *Target) index() error {
	r := bufio.NewReader(t.f)
	var good int64
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // anything after the last newline is torn
		}
		if err != nil {
			return err
		}
		var l Line
		if err := json.Unmarshal(bytes.TrimSpace(line), &l); err != nil || l.Key == "" {
			return fmt.Errorf("line %d is not a ticket line: %v", t.n+1, err)
		}
		t.n++
		good += int64(len(line))
		t.seen[idOf(l.Key)] = t.n
		if l.Comment == nil && l.Update == nil {
			t.tkts.set(t.n)
		}
	}
	if err := t.f.Truncate(good); err != nil {
		return err
	}
	_, err := t.f.Seek(good, io.SeekStart)
	return err
}

// Name implements downstream.Target.
func (t *Target) Name() string { return t.name }

// Capabilities of every local target: keyed, with a consistent lookup.
var Capabilities = downstream.Capabilities{DedupeKey: true, Lookup: downstream.LookupConsistent}

// Workers implements downstream.Parallel: a file append has no rate limit,
// and concurrent deliveries share an fsync, so more workers cut the lag
// under load (decision 0085 has the measurements).
func (t *Target) Workers() int { return 64 }

var _ downstream.Parallel = (*Target)(nil)

// Capabilities implements downstream.Target.
func (t *Target) Capabilities() downstream.Capabilities { return Capabilities }

// Deliver appends the ticket unless its key is already in the file, and
// answers once its line is durable. Concurrent deliveries share fsyncs: one
// sync covers every line written before it (group commit), so the file's
// throughput is not one ticket per fsync.
func (t *Target) Deliver(ctx context.Context, d downstream.Delivery) (downstream.Receipt, error) {
	line, err := t.write(Line{Key: d.Key, Ticket: d.Ticket.WithFields()})
	if err != nil {
		return downstream.Receipt{}, err
	}
	return t.receipt(line), nil
}

// write appends l (stamped now) unless its key is already in the file,
// and returns its line number once the line is durable.
func (t *Target) write(l Line) (int, error) {
	line, err := t.append(l)
	if err != nil {
		return 0, err
	}
	if err := t.sync(line); err != nil {
		return 0, err
	}
	return line, nil
}

// append writes l's line (or finds the line already written for its key)
// and returns its number.
func (t *Target) append(l Line) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return 0, &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf("local target needs a restart: %w", t.err)}
	}
	id := idOf(l.Key)
	if n, ok := t.seen[id]; ok {
		return n, nil // its caller or this one waits for the sync that covers it
	}
	l.DeliveredAt = t.now().UTC()
	b, err := json.Marshal(l)
	if err != nil {
		return 0, &downstream.Error{Class: downstream.Permanent, Err: err}
	}
	if _, err := t.f.Write(append(b, '\n')); err != nil {
		t.err = err
		return 0, &downstream.Error{Class: downstream.Transient, Err: err}
	}
	t.n++
	t.seen[id] = t.n
	if l.Comment == nil && l.Update == nil {
		t.tkts.set(t.n)
	}
	return t.n, nil
}

// sync returns once line n is durable, syncing the file if no sync since
// its write has done so.
func (t *Target) sync(n int) error {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	if t.synced >= n {
		return nil
	}
	t.mu.Lock()
	written := t.n
	t.mu.Unlock()
	if err := t.f.Sync(); err != nil {
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
		return &downstream.Error{Class: downstream.Transient, Err: err}
	}
	t.synced = written
	return nil
}

// Find implements downstream.Finder.
func (t *Target) Find(ctx context.Context, d downstream.Delivery) (downstream.Receipt, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.seen[idOf(d.Key)]
	if !ok {
		return downstream.Receipt{}, false, nil
	}
	return t.receipt(n), true, nil
}

// keyID stands for a dedupe key in the index: the first 16 bytes of its
// SHA-256. The index holds every key in the file for as long as the process
// runs; a fixed 16 bytes instead of the key's string keeps that index markedly
// smaller (decision 0082 has the measurements). Keys derive from caller-chosen
// request ids, so the hash must resist chosen collisions (two keys with one id
// would drop a ticket as a duplicate): 128 bits of SHA-256 take ~2^64 tries to
// collide.
type keyID [16]byte

func idOf(key string) keyID {
	sum := sha256.Sum256([]byte(key))
	return keyID(sum[:16])
}

func (t *Target) receipt(line int) downstream.Receipt {
	return downstream.Receipt{ExternalID: "line-" + strconv.Itoa(line), URL: t.url + "#L" + strconv.Itoa(line)}
}

// fileURL is the file URL of an absolute path ("file:///srv/data/t.jsonl"),
// its characters escaped as a URL path needs. A relative path would read as
// a host ("file://data/t.jsonl"): Open makes it absolute first.
func fileURL(abs string) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows volume: file:///C:/data/t.jsonl
	}
	return (&url.URL{Scheme: "file", Path: p}).String()
}

// Close closes the file.
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.f.Close()
}
