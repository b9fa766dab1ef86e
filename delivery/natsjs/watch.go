package natsjs

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamState is what the dispatcher's stream watcher reads of the stream.
type StreamState struct {
	// Created is when the stream was created: another value than before
	// means it was deleted and created again meanwhile.
	Created           time.Time
	FirstSeq, LastSeq uint64
	Msgs              uint64
	// Deleted counts the messages removed between FirstSeq and LastSeq.
	Deleted int
	// FirstTime is when the first message still stored was stored.
	FirstTime time.Time
}

func stateOf(info *jetstream.StreamInfo) StreamState {
	return StreamState{Created: info.Created, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
		Msgs: info.State.Msgs, Deleted: info.State.NumDeleted, FirstTime: info.State.FirstTime}
}

// The repairs Check makes (values of metrics.StreamRepairKinds).
const (
	RepairStreamMissing = "stream_missing"
	RepairStreamConfig  = "stream_config"
)

// StreamWatch looks the stream up and puts it back when it is gone or its
// configuration was changed under the dispatcher (by anyone who can reach
// the broker's API: an operator's nats CLI, another tool, a broker that
// came back without its store).
type StreamWatch struct {
	*StreamChecker
	js  jetstream.JetStream
	cfg StreamConfig

	mu   sync.Mutex
	want jetstream.StreamConfig // as the server stored it after the last EnsureStream
}

// NewStreamWatch watches the stream of cfg; st is the stream EnsureStream
// returned: its configuration, as the server completed it, is the one Check
// keeps.
func NewStreamWatch(js jetstream.JetStream, cfg StreamConfig, st jetstream.Stream) *StreamWatch {
	cfg = cfg.WithDefaults()
	return &StreamWatch{StreamChecker: NewStreamChecker(js, cfg.Name), js: js, cfg: cfg, want: st.CachedInfo().Config}
}

// Name is the stream's name.
func (w *StreamWatch) Name() string { return w.cfg.Name }

// State reads the stream's state.
func (w *StreamWatch) State(ctx context.Context) (StreamState, error) {
	s, err := w.js.Stream(ctx, w.cfg.Name)
	if err != nil {
		return StreamState{}, fmt.Errorf("natsjs: stream %s: %w", w.cfg.Name, err)
	}
	return stateOf(s.CachedInfo()), nil
}

// Check reads the stream's state, after putting the stream back if it was
// gone (repaired RepairStreamMissing: a new, empty stream) or its
// configuration differs from the one EnsureStream set (RepairStreamConfig).
func (w *StreamWatch) Check(ctx context.Context) (st StreamState, repaired string, err error) {
	if nc := w.js.Conn(); !nc.IsConnected() {
		// A request would wait in the reconnect buffer until ctx ends.
		return StreamState{}, "", fmt.Errorf("natsjs: not connected to the NATS server (%s)", nc.Status())
	}
	s, err := w.js.Stream(ctx, w.cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		repaired = RepairStreamMissing
	case err != nil:
		return StreamState{}, "", fmt.Errorf("natsjs: stream %s: %w", w.cfg.Name, err)
	case !w.isWanted(s.CachedInfo().Config):
		repaired = RepairStreamConfig
	default:
		return stateOf(s.CachedInfo()), "", nil
	}
	s, err = EnsureStream(ctx, w.js, w.cfg)
	if err != nil {
		return StreamState{}, "", fmt.Errorf("natsjs: putting the stream back (%s): %w", repaired, err)
	}
	w.mu.Lock()
	w.want = s.CachedInfo().Config
	w.mu.Unlock()
	return stateOf(s.CachedInfo()), repaired, nil
}

func (w *StreamWatch) isWanted(c jetstream.StreamConfig) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return sameConfig(c, w.want)
}

// sameConfig compares two stream configurations as the server stores them,
// but for the metadata the server writes itself.
func sameConfig(a, b jetstream.StreamConfig) bool {
	a.Metadata, b.Metadata = nil, nil
	return reflect.DeepEqual(a, b)
}
