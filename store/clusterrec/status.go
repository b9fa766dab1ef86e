package clusterrec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
)

// This file is the record's read-only side for operators: what
// `dispatcher status` prints and the dispatcher's metrics export. Nothing
// here writes to the bucket.

// ErrNoBucket: the installation has no request bucket (no dispatcher of it
// ran in multi-host mode on this NATS server).
var ErrNoBucket = errors.New("clusterrec: no request bucket")

// Inspect returns a read-only store of cfg.Installation's existing bucket,
// for status: unlike Open it never creates or changes the bucket, and
// unlike Bind it does not wait for one.
func Inspect(ctx context.Context, js jetstream.JetStream, inst installation.Name) (*Store, error) {
	name := inst.Bucket()
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w %s: no dispatcher of installation %s has run with -multi-host on this NATS server", ErrNoBucket, name, inst)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: bucket %s: %w", ErrUnavailable, name, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: bucket %s: %w", ErrUnavailable, name, err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if owner := info.Config.Metadata[metaInstallation]; owner != string(inst) {
		return nil, fmt.Errorf("%w: bucket %s belongs to installation %q", ErrForeignBucket, name, owner)
	}
	cfg := Config{Installation: inst, Replicas: info.Config.Replicas, MaxBytes: info.Config.MaxBytes, TTL: info.Config.MaxAge}.WithDefaults()
	return &Store{cfg: cfg, js: js, kv: kv, stream: "KV_" + name, log: slog.New(slog.DiscardHandler), now: time.Now}, nil
}

// BucketInfo is the bucket's stream as its leader (or, with no leader, a
// member) reports it: size, limits and replicas.
func (s *Store) BucketInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	st, err := s.kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: bucket %s: %w", ErrUnavailable, s.cfg.Installation.Bucket(), err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo(), nil
}

// HostSeen is one host's heartbeat entry as the bucket holds it.
type HostSeen struct {
	Heartbeat
	// LastBeat is the server's timestamp of the entry: the host's last
	// beat, or the moment another host marked it adopting or adopted.
	LastBeat time.Time
}

// Host states as an operator sees them: the heartbeat's own state, and
// HostSilent for a host marked live whose last beat is older than the
// dead-after time (lost, not yet adopted).
const HostSilent = "silent"

// HostStates lists every state HostSeen.State can return.
var HostStates = []string{HostLive, HostSilent, HostAdopting, HostAdopted}

// State is the host's state at now, for a cluster whose hosts are lost
// after deadAfter without a beat. now is the caller's clock: the
// heartbeats carry the server's, so the two must agree to within a
// fraction of deadAfter (as NTP keeps them). The adoption itself never
// relies on this: it compares server timestamps only (Hosts).
func (h HostSeen) State(now time.Time, deadAfter time.Duration) string {
	switch {
	case h.Heartbeat.State == HostAdopted, h.Heartbeat.State == HostAdopting:
		return h.Heartbeat.State
	case now.Sub(h.LastBeat) >= deadAfter:
		return HostSilent
	}
	return HostLive
}

// HostsSeen lists the heartbeats in the bucket, by host id: every host of
// the installation that beat within the bucket's TTL and whose entry no
// one deleted.
func (s *Store) HostsSeen(ctx context.Context) ([]HostSeen, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*s.cfg.OpTimeout)
	defer cancel()
	lister, err := s.kv.ListKeysFiltered(ctx, hostPrefix+">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: hosts: %w", ErrUnavailable, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var hosts []HostSeen
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or deleted since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("%w: host %s: %w", ErrUnavailable, k, err)
		}
		var hb Heartbeat
		if err := json.Unmarshal(e.Value(), &hb); err != nil {
			return nil, fmt.Errorf("clusterrec: heartbeat %s: %w", k, err)
		}
		if hb.Host == "" {
			hb.Host = strings.TrimPrefix(k, hostPrefix)
		}
		hosts = append(hosts, HostSeen{Heartbeat: hb, LastBeat: e.Created()})
	}
	slices.SortFunc(hosts, func(a, b HostSeen) int { return strings.Compare(a.Host, b.Host) })
	return hosts, nil
}

// ErrHostNotFinished: ForgetHost refused a host that is live, or whose
// requests the other hosts have not finished adopting.
var ErrHostNotFinished = errors.New("clusterrec: the host's adoption is not finished")

// ErrHostUnknown: ForgetHost found no heartbeat of that host.
var ErrHostUnknown = errors.New("clusterrec: no heartbeat of that host")

// ForgetHost deletes the heartbeat of a host removed for good, once the
// other hosts have finished adopting what it left: it then leaves
// `dispatcher status` and ticketrelay_cluster_host_lost (the
// TicketrelayClusterHostLost alert ends). It refuses a host that is live
// or silent (not adopted yet), and one adopted less than quietRounds
// adoptions ago in a row without finding anything: its mcp-front may have
// accepted requests after its dispatcher was lost, which only a later
// adoption looks at. The delete is conditional on the entry read, so a
// host that beats or is adopted again meanwhile is kept. A host forgotten
// that runs again beats and rejoins.
func (s *Store) ForgetHost(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	key := hostPrefix + host
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w %q in installation %s", ErrHostUnknown, host, s.cfg.Installation)
	}
	if err != nil {
		return fmt.Errorf("%w: host %s: %w", ErrUnavailable, host, err)
	}
	var hb Heartbeat
	if err := json.Unmarshal(e.Value(), &hb); err != nil {
		return fmt.Errorf("clusterrec: heartbeat %s: %w", key, err)
	}
	switch {
	case (HostSeen{Heartbeat: hb}).Finished():
	case hb.State == HostAdopted, hb.State == HostAdopting:
		return fmt.Errorf("%w: host %s is being adopted by %s (%d of %d adoptions in a row found nothing); try again once status shows it finished",
			ErrHostNotFinished, host, hb.By, hb.Quiet, quietRounds)
	default:
		return fmt.Errorf("%w: host %s is %s, last beat at %s; a lost host is adopted after -host-dead-after, then can be forgotten",
			ErrHostNotFinished, host, hb.State, e.Created().UTC().Format(time.RFC3339))
	}
	if err := s.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("%w: host %s changed meanwhile (it beat, or was adopted again); look at status and try again", ErrHostNotFinished, host)
		}
		return fmt.Errorf("%w: forget host %s: %w", ErrUnavailable, host, err)
	}
	return nil
}

// Finished reports whether h's adoption is over (and ForgetHost would take
// it): adopted, and quietRounds adoptions in a row found nothing more.
func (h HostSeen) Finished() bool {
	return h.Heartbeat.State == HostAdopted && h.Quiet >= quietRounds
}
