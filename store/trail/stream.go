package trail

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
)

// StreamName is the name of installation inst's trail stream, where every
// host of a multi-host installation ships its entries.
func StreamName(inst installation.Name) string { return inst.Stream() + "-trail" }

// subjectPrefix: a first token of its own, so that the trail stream never
// overlaps the installation's ticket stream (ticketrelay.NAME.>).
func subjectPrefix(inst installation.Name) string { return "ticketrelay-trail." + string(inst) + "." }

// EnsureStream creates inst's trail stream if it is missing: replicas
// copies, entries kept for maxAge (the trail's retention). A stream that
// exists is left as it is (another host made it).
func EnsureStream(ctx context.Context, js jetstream.JetStream, inst installation.Name, replicas int, maxAge time.Duration) (jetstream.Stream, error) {
	name := StreamName(inst)
	s, err := js.Stream(ctx, name)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("trail: stream %s: %w", name, err)
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "ticketrelay audit trail of installation " + inst.String(),
		Subjects:    []string{subjectPrefix(inst) + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    cmp.Or(replicas, 1),
		MaxAge:      maxAge,
		Duplicates:  2 * time.Minute,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("trail: create stream %s: %w", name, err)
	}
	return s, nil
}

// Shipper ships a host's trail to its installation's trail stream: every
// entry, in order, each as one message with Nats-Msg-Id HOST:SEQ, so that
// a batch shipped again after a crash (before its cursor was recorded) is
// dropped by the stream's duplicate window. The cursor is recorded once
// the stream acknowledged every message of a batch.
type Shipper struct {
	Store        *Store
	JS           jetstream.JetStream
	Installation installation.Name
	Host         string        // the dispatcher's host id (the ledger's id)
	Every        time.Duration // how often it looks for new entries; default 1s
	Log          *slog.Logger
}

// Run ships until ctx ends; a failed round is logged and retried.
func (s *Shipper) Run(ctx context.Context) error {
	name := "stream:" + StreamName(s.Installation)
	subject := subjectPrefix(s.Installation) + s.Host
	every := cmp.Or(s.Every, time.Second)
	for {
		seq, err := s.Store.Cursor(ctx, name)
		if err == nil {
			err = follow(ctx, s.Store, name, seq, every, func(ctx context.Context, batch []Entry) error {
				return s.publish(ctx, subject, batch)
			})
		}
		if ctx.Err() != nil {
			return nil
		}
		s.Log.Warn("audit trail: shipping to the trail stream failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func (s *Shipper) publish(ctx context.Context, subject string, batch []Entry) error {
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	for _, e := range batch {
		e.Host = s.Host
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, s.Host+":"+strconv.FormatInt(e.Seq, 10))
		f, err := s.JS.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("trail: ship: %w", err)
		}
		futures = append(futures, f)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("trail: ship: %w", err)
		case <-wait.Done():
			return fmt.Errorf("trail: ship: no acknowledgement: %w", wait.Err())
		}
	}
	return nil
}

// ReadStream returns the entries of inst's trail stream that f selects
// (every host's), in the order the stream stored them; with f.Since set it
// starts at that time. Each entry names its Host.
func ReadStream(ctx context.Context, js jetstream.JetStream, inst installation.Name, f Filter) ([]Entry, error) {
	s, err := js.Stream(ctx, StreamName(inst))
	if err != nil {
		return nil, fmt.Errorf("trail: stream %s: %w", StreamName(inst), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("trail: stream %s: %w", StreamName(inst), err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	// An ephemeral consumer of the reader's own, created (and so placed
	// on the stream's leader) before the first fetch, gone after a while
	// if the reader dies.
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1}
	if !f.Since.IsZero() {
		since := f.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	c, err := s.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("trail: read %s: consumer: %w", StreamName(inst), err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, c.CachedInfo().Name)
	}()
	var out []Entry
	unready := 0
	for {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("trail: read %s: fetch: %w", StreamName(inst), err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("trail: read %s: %w", StreamName(inst), err)
			}
			var e Entry
			if err := json.Unmarshal(m.Data(), &e); err == nil && f.Matches(e) {
				out = append(out, e)
			}
			if meta.Sequence.Stream >= last {
				return out, nil
			}
		}
		err = batch.Error()
		if errors.Is(err, nats.ErrNoResponders) && n == 0 && unready < 50 {
			// A consumer just created on another node of a cluster: its
			// interest has not reached the reader's node yet.
			unready++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("trail: read %s: fetch: %w", StreamName(inst), err)
		}
		if n == 0 {
			// Nothing more within the wait: what remains was removed
			// (max age) after Info.
			return out, nil
		}
	}
}

// Publish records e straight in inst's trail stream, for an operator
// action that needs no database (forget-host), on a subject of its own;
// host says where it was taken (any text). Nats-Msg-Id is host and time.
func Publish(ctx context.Context, js jetstream.JetStream, inst installation.Name, host string, e Entry) error {
	e = e.Clean()
	if err := e.Validate(); err != nil {
		return err
	}
	e.Host = host
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subjectPrefix(inst) + "operator")
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, host+":t"+strconv.FormatInt(e.Time.UnixNano(), 10))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("trail: record in %s: %w", StreamName(inst), err)
	}
	return nil
}

// CopiedEntry is another host's audit entry about a request, at Seq of the
// trail stream, as a host's copy of the installation folds it.
type CopiedEntry struct {
	Seq   uint64
	Entry Entry
}
