package natsjs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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

// Stream metadata that marks a stream as an installation's. nats-server
// 2.10 is the first to keep it: EnsureStream refuses an older server
// (CheckServer) and a server that drops the marks.
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
// A stream without marks is taken on the embedded server's installation,
// whose stream a ticketrelay from before the marks made, and when it is
// the stream a ticketrelay made on a server that dropped the marks
// (madeUnmarked).
func checkOwner(info *jetstream.StreamInfo, c StreamConfig) error {
	md := info.Config.Metadata
	inst, marked := md[MetaInstallation]
	switch {
	case !marked && (c.Installation == installation.Embedded || madeUnmarked(info.Config, c)):
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

// madeUnmarked reports whether s is the stream of c as a ticketrelay made
// it on a nats-server older than 2.10, which dropped its marks: its name,
// subjects and description are ticketrelay's (a stream of someone else's
// with all three is not to be expected). It is taken and marked (by a server
// that keeps marks: EnsureStream checks the version first), so that a
// dispatcher that ran on such a server starts again once the server is
// upgraded, with the tickets its stream holds. The first host to start
// marks it as its own.
func madeUnmarked(s jetstream.StreamConfig, c StreamConfig) bool {
	return s.Description == streamDescription && slices.Equal(s.Subjects, []string{c.Installation.Subjects()})
}

// streamDescription is the description of every stream ticketrelay makes.
const streamDescription = "ticketrelay: accepted tickets, one message per request_id"

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
// ErrForeignStream and left as it is. A server older than nats-server 2.10
// is refused with ErrServerTooOld before anything is written, and so is,
// after the write, a server that did not keep the stream's marks (a node
// older than 2.10 in its cluster): a stream whose marks were dropped could
// never be told from another's at the next start.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := CheckServer(js.Conn()); err != nil {
		return nil, err
	}
	return ensureStream(ctx, js, c)
}

// ensureStream is EnsureStream once c is complete and valid and the
// server's version was checked.
func ensureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	switch s, err := js.Stream(ctx, c.Name); {
	case err == nil:
		if err := checkOwner(s.CachedInfo(), c); err != nil {
			return nil, err
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("natsjs: stream %s: %w", c.Name, err)
	}
	s, err := js.CreateOrUpdateStream(ctx, c.Definition())
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
	if inst, ok := s.CachedInfo().Config.Metadata[MetaInstallation]; !ok || inst != string(c.Installation) {
		return nil, fmt.Errorf("%w: %s did not keep the metadata of stream %s (a node older than nats-server %d.%d in its "+
			"cluster?): %s", ErrServerTooOld, js.Conn().ConnectedUrlRedacted(), c.Name, MinServerMajor, MinServerMinor, whyMinVersion)
	}
	return s, nil
}

// Definition is the stream as EnsureStream creates it, marked as c's.
// c must be complete (WithDefaults).
func (c StreamConfig) Definition() jetstream.StreamConfig {
	md := map[string]string{MetaInstallation: string(c.Installation)}
	if c.Owner != "" {
		md[MetaOwner] = c.Owner
	}
	return jetstream.StreamConfig{
		Name:        c.Name,
		Description: streamDescription,
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
	}
}

// JetStream API error codes of nats-server that nats.go does not name.
const (
	jsErrInvalidConfig  jetstream.ErrorCode = 10052 // JSStreamInvalidConfigF
	jsErrSubjectOverlap jetstream.ErrorCode = 10065 // JSStreamSubjectOverlapErr
)

// AllowsAtomicBatches reports whether the server took AllowAtomicPublish for
// s: nats-server before 2.12 drops the setting it does not know.
func AllowsAtomicBatches(s jetstream.Stream) bool { return s.CachedInfo().Config.AllowAtomicPublish }
