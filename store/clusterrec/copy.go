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

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/request"
	"ticketrelay/store/trail"
)

// CopySink is where Copy folds the installation's records and the other
// hosts' audit entries: this host's ledger (ledger.FoldRecords and the
// rest), read by the operator console.
type CopySink interface {
	ClusterCursor(ctx context.Context, name string) (uint64, error)
	FoldRecords(ctx context.Context, recs []request.CopiedRecord, upTo uint64) error
	FoldTrail(ctx context.Context, entries []trail.CopiedEntry, upTo uint64) error
	PruneClusterCopy(ctx context.Context, recordsFrom, trailFrom uint64, batch int) (int64, error)
}

// Copy keeps this host's read copy of the whole installation for the
// operator console: it follows the request bucket's stream (every host's
// claims and delivery records, as written) and the trail stream (every
// host's audit entries), each from where the copy stopped, and folds them
// into the sink in batches. The console's lists then read one local table
// by index, whatever the installation's size, and say how current the
// copy is (State).
type Copy struct {
	store *Store
	js    jetstream.JetStream
	inst  installation.Name
	sink  CopySink
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	streams map[string]*CopyState
}

// CopyConfig tunes a Copy; zero fields take the defaults.
type CopyConfig struct {
	// Wait is how long a fetch waits for news: the copy's lag when idle
	// is at most about this. Default 500ms.
	Wait time.Duration
	// Batch bounds the messages folded in one transaction. Default 500.
	Batch int
}

// copyWait and copyBatch are CopyConfig's defaults.
const (
	copyWait  = 500 * time.Millisecond
	copyBatch = 500
)

// StaleAfter is how long after its last answer from the server the copy
// is no longer shown as current: several waits missed in a row.
const StaleAfter = 5 * time.Second

// CopyState is how current one stream's copy is.
type CopyState struct {
	// Checked is the last time the stream answered the copy and every
	// message it had then was folded (or Behind remained); zero: never.
	Checked time.Time
	// Behind is how many messages the stream held beyond the copy at
	// Checked.
	Behind uint64
	// Err is the last failure since Checked; nil if the last fetch
	// answered. FailingSince is when failures began.
	Err          error
	FailingSince time.Time
}

// NewCopy makes the copy of s's installation into sink.
func NewCopy(s *Store, js jetstream.JetStream, sink CopySink, log *slog.Logger, now func() time.Time) *Copy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Copy{store: s, js: js, inst: s.cfg.Installation, sink: sink, log: log, now: now,
		streams: map[string]*CopyState{request.CopyRecords: {}, request.CopyTrail: {}}}
}

// State is the copy's state now: of the records (the lists and the
// requests' statuses) and of the trail (the audit entries).
func (c *Copy) State() (records, trail CopyState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.streams[request.CopyRecords], *c.streams[request.CopyTrail]
}

// Current reports whether a stream's copy st may be shown as current at
// now: checked recently, nothing left behind.
func (st CopyState) Current(now time.Time) bool {
	return !st.Checked.IsZero() && now.Sub(st.Checked) < StaleAfter && st.Behind == 0 && st.Err == nil
}

func (c *Copy) answered(name string, behind uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[name]
	st.Checked, st.Behind, st.Err, st.FailingSince = c.now(), behind, nil, time.Time{}
}

func (c *Copy) failed(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[name]
	if st.Err == nil {
		st.FailingSince = c.now()
	}
	st.Err = err
}

// Run follows both streams until ctx ends, and prunes what the streams
// no longer hold every few minutes.
func (c *Copy) Run(ctx context.Context, cfg CopyConfig) error {
	cfg.Wait, cfg.Batch = cmp.Or(cfg.Wait, copyWait), cmp.Or(cfg.Batch, copyBatch)
	var wg sync.WaitGroup
	bucket := c.inst.Bucket()
	follow := []struct {
		name, stream, filter string
		fold                 func(context.Context, []jetstream.Msg, uint64) error
	}{
		{request.CopyRecords, c.store.stream, "$KV." + bucket + "." + recordPrefix + ">", c.foldRecords},
		{request.CopyTrail, trail.StreamName(c.inst), "", c.foldTrail},
	}
	for _, f := range follow {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := c.follow(ctx, cfg, f.name, f.stream, f.filter, f.fold)
				if ctx.Err() != nil {
					return
				}
				// A consumer just made on another node may miss its first
				// heartbeats (its interest still on its way): said only if
				// the next attempt fails too.
				level := slog.LevelInfo
				if records, trail := c.State(); records.Err != nil || trail.Err != nil {
					level = slog.LevelWarn
				}
				c.failed(f.name, err)
				c.log.Log(ctx, level, "console copy: following the stream failed; again shortly", "stream", f.stream, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		})
	}
	wg.Go(func() { c.prune(ctx) })
	wg.Wait()
	return nil
}

// follow folds stream from the copy's cursor until ctx ends or a fetch
// fails. An ephemeral consumer of its own, in memory, gone a minute
// after this host stops reading.
func (c *Copy) follow(ctx context.Context, cfg CopyConfig, name, stream, filter string, fold func(context.Context, []jetstream.Msg, uint64) error) error {
	from, err := c.sink.ClusterCursor(ctx, name)
	if err != nil {
		return err
	}
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	cc := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1, FilterSubject: filter}
	if from > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := s.CreateConsumer(ctx, cc)
	if err != nil {
		return fmt.Errorf("stream %s: consumer: %w", stream, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	for ctx.Err() == nil {
		// The heartbeat tells a server that stopped answering from one
		// with nothing new.
		batch, err := cons.Fetch(cfg.Batch, jetstream.FetchMaxWait(cfg.Wait), jetstream.FetchHeartbeat(cfg.Wait*2/5))
		if err != nil {
			return fmt.Errorf("stream %s: fetch: %w", stream, err)
		}
		var msgs []jetstream.Msg
		var last, pending uint64
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("stream %s: %w", stream, err)
			}
			msgs = append(msgs, m)
			last, pending = meta.Sequence.Stream, meta.NumPending
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stream %s: fetch: %w", stream, err)
		}
		if len(msgs) > 0 {
			if err := fold(ctx, msgs, last); err != nil {
				return err
			}
		}
		c.answered(name, pending)
	}
	return nil
}

// foldRecords folds the bucket's record writes msgs.
func (c *Copy) foldRecords(ctx context.Context, msgs []jetstream.Msg, upTo uint64) error {
	recs := make([]request.CopiedRecord, 0, len(msgs))
	prefix := "$KV." + c.inst.Bucket() + "."
	for _, m := range msgs {
		meta, _ := m.Metadata()
		key := strings.TrimPrefix(m.Subject(), prefix)
		r := request.CopiedRecord{Key: key, Rev: meta.Sequence.Stream}
		if op := m.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			r.Deleted = true
			recs = append(recs, r)
			continue
		}
		var rec Record
		if err := json.Unmarshal(m.Data(), &rec); err != nil {
			c.log.Warn("console copy: a record that does not read; left out", "key", key, "err", err)
			continue
		}
		t := rec.Ticket
		r.RequestID, r.Subject, r.TicketID, r.Target, r.Title, r.Fingerprint = rec.Scoped(), t.Subject, t.ID, t.Target, t.Title, t.Fingerprint
		r.Host, r.Phase, r.AcceptedAt = rec.Host, string(rec.Phase), t.CreatedAt
		if d := rec.Delivery; d != nil {
			r.Delivery, r.By = d.Ledger(r.RequestID), d.By
			r.Delivery.Version = d.Version
			if d.Call != nil {
				r.Delivery.Attempt = d.Call.Attempt(d)
			}
		}
		recs = append(recs, r)
	}
	return c.sink.FoldRecords(ctx, recs, upTo)
}

// foldTrail folds the trail stream's entries msgs that name a request
// and were shipped by another host (this host's are in its own trail).
func (c *Copy) foldTrail(ctx context.Context, msgs []jetstream.Msg, upTo uint64) error {
	var entries []trail.CopiedEntry
	for _, m := range msgs {
		var e trail.Entry
		if err := json.Unmarshal(m.Data(), &e); err != nil || e.RequestID == "" || e.Host == c.store.Host() {
			continue
		}
		meta, _ := m.Metadata()
		entries = append(entries, trail.CopiedEntry{Seq: meta.Sequence.Stream, Entry: e})
	}
	return c.sink.FoldTrail(ctx, entries, upTo)
}

// pruneEvery is how often the copy drops what the streams no longer hold.
const pruneEvery = 5 * time.Minute

// prune removes from the copy the records the bucket expired and the
// entries the trail stream aged out: below each stream's first sequence.
func (c *Copy) prune(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(pruneEvery):
		}
		first := func(stream string) (uint64, error) {
			s, err := c.js.Stream(ctx, stream)
			if err != nil {
				return 0, err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return 0, err
			}
			return info.State.FirstSeq, nil
		}
		recs, err := first(c.store.stream)
		var trailFrom uint64
		if err == nil {
			trailFrom, err = first(trail.StreamName(c.inst))
		}
		for err == nil {
			var n int64
			if n, err = c.sink.PruneClusterCopy(ctx, recs, trailFrom, 1000); n == 0 {
				break
			}
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("console copy: pruning failed; again later", "err", err)
		}
	}
}
