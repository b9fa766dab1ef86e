package natsjs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
)

// StreamConfig is ticketrelay's stream. Zero fields take the defaults.
type StreamConfig struct {
	// Installation whose stream this is: it names the stream and its
	// subjects (installation.Name). Default: the embedded server's.
	Installation installation.Name
	// Owner is who may use the stream: the ledger of a single-host
	// installation, or OwnerCluster for the hosts of a multi-host one.
	// Empty: not checked (tests, tools).
	Owner string
	// Name of the stream. Default: the installation's.
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
	c.Name = cmp.Or(c.Name, c.Installation.Stream())
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

// Stream metadata that marks a stream as an installation's (nats-server
// 2.10+ keeps it; older servers drop it, and then nothing is checked).
const (
	MetaInstallation = "ticketrelay.installation"
	MetaOwner        = "ticketrelay.owner"
)

// OwnerCluster is the owner of a multi-host installation's stream: every
// host of the installation uses it.
const OwnerCluster = "cluster"

// ErrForeignStream: the stream belongs to another installation or host.
var ErrForeignStream = errors.New("natsjs: the stream belongs to someone else")

// checkOwner refuses a stream marked as another installation's or owner's.
// A stream without marks is taken only on the embedded server's
// installation, whose stream a ticketrelay from before the marks made.
func checkOwner(info *jetstream.StreamInfo, c StreamConfig) error {
	md := info.Config.Metadata
	inst, marked := md[MetaInstallation]
	switch {
	case !marked && c.Installation == installation.Embedded:
		return nil
	case !marked:
		return fmt.Errorf("%w: stream %s exists and was not made by ticketrelay (it carries no %s mark); "+
			"choose another -installation, or remove that stream if it is a leftover", ErrForeignStream, c.Name, MetaInstallation)
	case inst != string(c.Installation):
		return fmt.Errorf("%w: stream %s belongs to installation %q, not %q", ErrForeignStream, c.Name, inst, c.Installation)
	case c.Owner != "" && md[MetaOwner] != c.Owner:
		return fmt.Errorf("%w: stream %s of installation %q is used by %s, and this dispatcher is %s. "+
			"Two hosts with their own ledgers cannot share a single-host installation: their forwarders would take each "+
			"other's messages. Give each host its own -installation, or run them all in multi-host mode; if that host "+
			"is gone for good, remove the stream (its undelivered tickets were that host's)", ErrForeignStream, c.Name,
			c.Installation, ownerText(md[MetaOwner]), ownerText(c.Owner))
	}
	return nil
}

func ownerText(owner string) string {
	if owner == OwnerCluster {
		return "the hosts of a multi-host installation"
	}
	return "the single host with ledger " + owner
}

// EnsureStream creates or updates the stream. Limits retention (never
// WorkQueue: a WorkQueue stream deletes acked messages, and JetStream
// rebuilds its dedupe map only from stored messages after a restart).
// A stream of another installation, or of another owner, is refused with
// ErrForeignStream and left as it is.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch s, err := js.Stream(ctx, c.Name); {
	case err == nil:
		if err := checkOwner(s.CachedInfo(), c); err != nil {
			return nil, err
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("natsjs: stream %s: %w", c.Name, err)
	}
	md := map[string]string{MetaInstallation: string(c.Installation)}
	if c.Owner != "" {
		md[MetaOwner] = c.Owner
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        c.Name,
		Description: "ticketrelay: accepted tickets, one message per request_id",
		Metadata:    md,
		Subjects:    []string{c.Installation.Subjects()},
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
		// in the last seconds in memory, so smaller blocks shrink the
		// embedded server's share of the dispatcher's peak RSS (decision
		// 0081 has the measurements). TestStreamBlockSize checks the files.
		MaxMsgsPerSubject: MaxMsgsPerSubject,
		// The relay sends its batches as atomic batches: one fsync each.
		AllowAtomicPublish: true,
	})
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api) && api.ErrorCode == jsErrSubjectOverlap:
		return nil, fmt.Errorf("%w: stream %s: its subjects %s overlap a stream of someone else on this server: "+
			"choose another -installation", ErrForeignStream, c.Name, c.Installation.Subjects())
	case errors.As(err, &api) && (api.ErrorCode == jsErrInvalidConfig || api.ErrorCode == jetstream.JSErrCodeStreamNameInUse):
		return nil, fmt.Errorf("%w: stream %s exists with a configuration ticketrelay cannot take or change to its own (%s); "+
			"remove it or choose another -installation", ErrInvalidStream, c.Name, api.Description)
	case err != nil:
		return nil, fmt.Errorf("natsjs: stream %s: %w", c.Name, err)
	}
	return s, nil
}

// JetStream API error codes of nats-server that nats.go does not name.
const (
	jsErrInvalidConfig  jetstream.ErrorCode = 10052 // JSStreamInvalidConfigF
	jsErrSubjectOverlap jetstream.ErrorCode = 10065 // JSStreamSubjectOverlapErr
)

// AllowsAtomicBatches reports whether the server took AllowAtomicPublish for
// s: nats-server before 2.12 drops the setting it does not know.
func AllowsAtomicBatches(s jetstream.Stream) bool { return s.CachedInfo().Config.AllowAtomicPublish }
