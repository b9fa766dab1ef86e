package natsjs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/outbox"
)

// StreamConfig is ticketrelay's stream. Zero fields take the defaults.
type StreamConfig struct {
	// Name of the stream. Default "TICKETS".
	Name string
	// Duplicates is the Nats-Msg-Id window. It must cover the longest time an
	// outbox row can stay published-but-unmarked (a relay crash: seconds to
	// the lease TTL) and the horizon in which a client may still retry (Claude
	// Code: ~30 minutes). JetStream keeps ~145 bytes of heap per id in the
	// window: 30 minutes at 1,000 tickets/s is 1.8M ids ≈ 260 MB, at 10/s
	// 18,000 ids ≈ 2.6 MB. Default 30m.
	Duplicates time.Duration
	// MaxAge is how long a message stays in the stream. With Limits retention
	// the dedupe map is rebuilt from stored messages on restart, so MaxAge must
	// be at least Duplicates; it also bounds how long a ticket can wait for a
	// downstream that is down. Default 7 days.
	MaxAge time.Duration
	// Replicas for a clustered JetStream. Default 1.
	Replicas int
}

// WithDefaults fills zero fields.
func (c StreamConfig) WithDefaults() StreamConfig {
	c.Name = cmp.Or(c.Name, "TICKETS")
	c.Duplicates = cmp.Or(c.Duplicates, 30*time.Minute)
	c.MaxAge = cmp.Or(c.MaxAge, 7*24*time.Hour)
	c.Replicas = cmp.Or(c.Replicas, 1)
	return c
}

// MaxMsgsPerSubject is the stream's per-subject message limit: unreachable,
// set for the block size it brings (see EnsureStream).
const MaxMsgsPerSubject = 1 << 40

// ErrInvalidStream is wrapped by configuration errors of the stream.
var ErrInvalidStream = errors.New("natsjs: invalid stream configuration")

// Validate checks the invariants the dedupe guarantee rests on.
func (c StreamConfig) Validate() error {
	if c.Duplicates < 30*time.Minute {
		return fmt.Errorf("%w: duplicate window %s is shorter than the 30m retry horizon of MCP clients", ErrInvalidStream, c.Duplicates)
	}
	if c.MaxAge < c.Duplicates {
		return fmt.Errorf("%w: stream max age %s is shorter than the duplicate window %s: "+
			"ids would be forgotten on restart", ErrInvalidStream, c.MaxAge, c.Duplicates)
	}
	return nil
}

// EnsureStream creates or updates the stream. Limits retention (never
// WorkQueue: a WorkQueue stream deletes acked messages, and JetStream
// rebuilds its dedupe map only from stored messages after a restart).
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        c.Name,
		Description: "ticketrelay: accepted tickets, one message per request_id",
		Subjects:    []string{outbox.SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  c.Duplicates,
		MaxAge:      c.MaxAge,
		Replicas:    c.Replicas,
		Discard:     jetstream.DiscardOld,
		// Not a limit: no subject can reach 2^40 messages before MaxAge, and
		// a message removed by a limit would be republished by the audit. It
		// sets the block size: nats-server (2.15, autoTuneFileStorageBlockSize)
		// gives a stream with a per-subject limit and no byte or message limit
		// 4 MB blocks instead of 8 MB. The server keeps each block it wrote
		// in the last seconds in memory, so at 1,400 tickets/s the embedded
		// server's share of the dispatcher's peak RSS fell by ~7 MB (make
		// bench scenario 7). TestStreamBlockSize checks the files.
		MaxMsgsPerSubject: MaxMsgsPerSubject,
		// The relay sends its batches as atomic batches: one fsync each.
		AllowAtomicPublish: true,
	})
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", c.Name, err)
	}
	return s, nil
}

// AllowsAtomicBatches reports whether the server took AllowAtomicPublish for
// s: nats-server before 2.12 drops the setting it does not know.
func AllowsAtomicBatches(s jetstream.Stream) bool { return s.CachedInfo().Config.AllowAtomicPublish }
