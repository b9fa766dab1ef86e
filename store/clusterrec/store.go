package clusterrec

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/internal/archetype"
)

// Config configures the record store. Zero fields take the defaults.
type Config struct {
	// Installation whose bucket this is (installation.Name.Bucket).
	Installation installation.Name
	// Host names this host in the records it writes: its ledger's id.
	// Required.
	Host string
	// Replicas of the bucket. Default 3: a record survives the loss of
	// any one node.
	Replicas int
	// TTL is how long a record lives after its last write. It must cover
	// the longest time a request can stay undelivered (the stream's max
	// age) and the retry horizon. Default 7 days.
	TTL time.Duration
	// MaxBytes bounds the bucket; a claim beyond it is refused (ErrFull).
	// Default -1: unbounded.
	MaxBytes int64
	// TakeoverAfter is how long a claim must stay unaccepted, watched by a
	// retry, before the retry takes it over: the claiming host crashed or
	// hangs between its claim and its commit. Default 10s.
	TakeoverAfter time.Duration
	// OpTimeout bounds one bucket operation; a claim retries operations
	// (an election takes seconds) until its caller's context ends.
	// Default 2s.
	OpTimeout time.Duration
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.Replicas = cmp.Or(c.Replicas, 3)
	c.TTL = cmp.Or(c.TTL, 7*24*time.Hour)
	c.MaxBytes = cmp.Or(c.MaxBytes, -1)
	c.TakeoverAfter = cmp.Or(c.TakeoverAfter, 10*time.Second)
	c.OpTimeout = cmp.Or(c.OpTimeout, 2*time.Second)
	return c
}

// Errors callers translate for their own users.
var (
	// ErrUnavailable: the bucket did not answer (no quorum, an election
	// that outlasted the call, the server unreachable). Nothing was
	// decided by this call; repeating it with the same request is safe.
	ErrUnavailable = errors.New("clusterrec: the cluster record is unavailable")
	// ErrInProgress: another host claimed the request and is committing
	// it; it neither finished nor was known dead before the call's end.
	ErrInProgress = errors.New("clusterrec: another host is still accepting this request")
	// ErrFull: the bucket reached its size limit; nothing was written.
	ErrFull = errors.New("clusterrec: the cluster record bucket is full")
	// ErrForeignBucket: the bucket belongs to another installation.
	ErrForeignBucket = errors.New("clusterrec: the bucket belongs to someone else")
)

// Store reads and writes the records of one installation's bucket.
type Store struct {
	usage  usage
	cfg    Config
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream string // the bucket's stream
	log    *slog.Logger
	now    func() time.Time
}

// Bucket metadata marks, as on the stream (natsjs).
const metaInstallation = "ticketrelay.installation"

// Open creates or updates the bucket of cfg.Installation and returns its
// store. A bucket of that name marked as another installation's is
// refused (ErrForeignBucket).
func Open(ctx context.Context, arch archetype.Archetype, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	arch = arch.WithDefaults()
	log, now := arch.Logger, arch.Now
	if cfg.Host == "" {
		return nil, errors.New("clusterrec: no host id")
	}
	name := cfg.Installation.Bucket()
	if kv, err := js.KeyValue(ctx, name); err == nil {
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("clusterrec: bucket %s: %w", name, err)
		}
		if inst, ok := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Metadata[metaInstallation]; ok && inst != string(cfg.Installation) {
			return nil, fmt.Errorf("%w: bucket %s belongs to installation %q", ErrForeignBucket, name, inst)
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("clusterrec: bucket %s: %w", name, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "ticketrelay: one record per request of installation " + string(cfg.Installation),
		History:     1,
		TTL:         cfg.TTL,
		MaxBytes:    cfg.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Metadata:    map[string]string{metaInstallation: string(cfg.Installation)},
	})
	if err != nil {
		return nil, fmt.Errorf("clusterrec: bucket %s: %w", name, err)
	}
	return &Store{cfg: cfg, js: js, kv: kv, stream: "KV_" + name, log: log, now: now}, nil
}

// Headroom is the share of MaxBytes that new claims may fill: the rest
// is kept for the records already there, whose every delivery outcome is
// a new revision that needs room before the old one goes (the bucket
// discards new writes when full, never old records).
const Headroom = 0.9

// usage caches the bucket's size, read at most once per usageEvery.
type usage struct {
	mu    sync.Mutex
	bytes uint64
	at    time.Time
}

const usageEvery = 2 * time.Second

// room refuses a new claim (ErrFull) once the bucket holds Headroom of
// MaxBytes.
func (s *Store) room(ctx context.Context) error {
	if s.cfg.MaxBytes <= 0 {
		return nil
	}
	used, err := s.Bytes(ctx)
	if err != nil {
		return nil // the claim's own write will tell
	}
	if float64(used) >= Headroom*float64(s.cfg.MaxBytes) {
		return fmt.Errorf("%w: %d of %d bytes used, and new requests may fill %.0f%%: raise -bucket-max-bytes or shorten -retention",
			ErrFull, used, s.cfg.MaxBytes, 100*Headroom)
	}
	return nil
}

// Bytes is the bucket's size, as read at most usageEvery ago.
func (s *Store) Bytes(ctx context.Context) (uint64, error) {
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	if !s.usage.at.IsZero() && time.Since(s.usage.at) < usageEvery {
		return s.usage.bytes, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	s.usage.bytes, s.usage.at = st.Bytes(), time.Now()
	return s.usage.bytes, nil
}

// grew counts a new record of n bytes into the cached size until the next
// read, so that a burst of claims meets the headroom before the bucket
// does.
func (s *Store) grew(n int) {
	s.usage.mu.Lock()
	s.usage.bytes += uint64(n + storeOverhead)
	s.usage.mu.Unlock()
}

// storeOverhead is about what the file store counts for a message beyond
// its bucket name, key and value: the subject's "$KV." and dot, the
// compare-and-set header and the record's framing and checksum.
const storeOverhead = 96

// MaxBytes is the bucket's size limit; -1: none.
func (s *Store) MaxBytes() int64 { return s.cfg.MaxBytes }

// Host is this host's id.
func (s *Store) Host() string { return s.cfg.Host }

// get reads key's record from the bucket's stream leader. KeyValue.Get
// is a direct get, which any replica may answer, a lagging one with an
// older record or none: a decision must see the last write acknowledged.
func (s *Store) get(ctx context.Context, key string) (rec Record, rev uint64, found bool, err error) {
	rev, found, err = s.getJSON(ctx, key, &rec)
	if err != nil || !found {
		return rec, 0, false, err
	}
	if rec.Format > FormatVersion {
		return rec, 0, false, fmt.Errorf("clusterrec: record %s has format %d, newer than this build's %d", key, rec.Format, FormatVersion)
	}
	return rec, rev, true, nil
}

// getJSON reads key's value from the bucket's stream leader into v.
func (s *Store) getJSON(ctx context.Context, key string, v any) (rev uint64, found bool, err error) {
	m, found, err := s.leaderGet(ctx, map[string]any{"last_by_subj": s.subject(key)})
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", key, err)
	}
	// A delete or purge marker: records are never deleted, but an
	// operator may have; the request is then unknown.
	if !found || m.deleted() {
		return 0, false, nil
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return 0, false, fmt.Errorf("clusterrec: record %s: %w", key, err)
	}
	return m.Seq, true, nil
}

// storedMsg is a message of the bucket's stream as its leader returns it.
type storedMsg struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Hdrs    []byte    `json:"hdrs"`
	Data    []byte    `json:"data"`
	Time    time.Time `json:"time"`
}

// subject is the bucket stream's subject of key (a key prefix and ">":
// of every key under it).
func (s *Store) subject(key string) string { return "$KV." + s.cfg.Installation.Bucket() + "." + key }

// deleted reports whether m is a delete or purge marker.
func (m storedMsg) deleted() bool {
	if len(m.Hdrs) == 0 {
		return false
	}
	h, err := nats.DecodeHeadersMsg(m.Hdrs)
	return err == nil && h.Get("KV-Operation") != ""
}

// scan reads from the bucket's stream leader, in stream order, the
// messages of the keys that start with prefix, delete markers left out,
// and calls each with a message's key until it returns false: every write
// acknowledged before the call is seen, as by get.
func (s *Store) scan(ctx context.Context, prefix string, each func(key string, m storedMsg) (more bool)) error {
	subjects := s.subject("")
	for seq := uint64(1); ; {
		m, found, err := s.leaderGet(ctx, map[string]any{"seq": seq, "next_by_subj": subjects + prefix + ">"})
		if err != nil || !found {
			return err
		}
		seq = m.Seq + 1
		if !m.deleted() && !each(strings.TrimPrefix(m.Subject, subjects), m) {
			return nil
		}
	}
}

// leaderGet asks the bucket's stream leader for one message (by
// "last_by_subj" or "seq"), within one OpTimeout. found is false when the
// stream has no such message.
func (s *Store) leaderGet(ctx context.Context, query map[string]any) (storedMsg, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	req, _ := json.Marshal(query)
	msg, err := s.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+s.stream, req)
	if err != nil {
		return storedMsg{}, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var resp struct {
		Message *storedMsg          `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return storedMsg{}, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return storedMsg{}, false, nil
	case resp.Error != nil:
		return storedMsg{}, false, fmt.Errorf("%w: %w", ErrUnavailable, resp.Error)
	case resp.Message == nil:
		return storedMsg{}, false, fmt.Errorf("%w: empty answer", ErrUnavailable)
	}
	return *resp.Message, true, nil
}

// Get reads the record of a request by its scoped id, from the leader.
func (s *Store) Get(ctx context.Context, scoped string) (Record, uint64, bool, error) {
	return s.get(ctx, Key(scoped))
}

// create writes rec under key if the key has no record (revision 0).
func (s *Store) create(ctx context.Context, key string, rec Record) (uint64, error) {
	return s.write(ctx, key, rec, 0, true)
}

// update writes rec under key if its record is still at rev.
func (s *Store) update(ctx context.Context, key string, rec Record, rev uint64) (uint64, error) {
	return s.write(ctx, key, rec, rev, false)
}

// errConflict: the key's record is not at the revision the write expected.
var errConflict = errors.New("clusterrec: the record changed since it was read")

func (s *Store) write(ctx context.Context, key string, rec Record, rev uint64, create bool) (uint64, error) {
	rec.Format = FormatVersion
	return s.writeJSON(ctx, key, rec, rev, create)
}

// writeJSON writes v's JSON under key: if the key has no value (create),
// else if its value is still at rev.
func (s *Store) writeJSON(ctx context.Context, key string, v any, rev uint64, create bool) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	var n uint64
	if create {
		n, err = s.kv.Create(ctx, key, b)
	} else {
		n, err = s.kv.Update(ctx, key, b, rev)
	}
	var api *jetstream.APIError
	switch {
	case err == nil:
		if create {
			s.grew(len(s.cfg.Installation.Bucket()) + len(key) + len(b))
		}
		return n, nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return 0, errConflict
	case errors.As(err, &api) && api.ErrorCode == jsErrStoreFull:
		return 0, fmt.Errorf("%w (%d bytes): raise -bucket-max-bytes or shorten -retention; %w", ErrFull, s.cfg.MaxBytes, err)
	}
	// Timed out, no responders, an election: the write may or may not
	// have been stored. Callers read the record again to find out.
	return 0, fmt.Errorf("%w: write %s: %w", ErrUnavailable, key, err)
}

// jsErrStoreFull is nats-server's "maximum bytes exceeded"
// (JSStreamStoreFailedF carries other store errors).
const jsErrStoreFull jetstream.ErrorCode = 10077
