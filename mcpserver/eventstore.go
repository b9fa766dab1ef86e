package mcpserver

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Memory charged for bookkeeping, besides the bytes of the events themselves,
// so that many small or empty events (the SSE priming events are empty) and
// many short streams (one per call) also count against the bound.
const (
	eventOverhead  = 48
	streamOverhead = 160
)

// EventStore keeps the SSE events of streamable HTTP sessions so that a client
// whose stream dropped can resume it with Last-Event-ID (protocol 2025-11-25).
// Its memory is bounded: everything it holds, events and per-stream
// bookkeeping, is charged against MaxBytes, and the oldest events of the
// whole store go first. A stream whose events are all gone is forgotten; a
// resumption that needs purged events fails (the SDK answers 400) instead of
// silently skipping them.
//
// The SDK's MemoryEventStore bounds only the event bytes: its per-stream
// entries (one per call) live until the session ends, so a long session grows
// without bound. This store does not.
type EventStore struct {
	mu       sync.Mutex
	maxBytes int
	nBytes   int
	sessions map[string]map[string]*eventLog // session ID → stream ID → log
	queue    []queued                        // every stored event, oldest first
	head     int                             // queue[head:] are the entries not yet purged
	stale    int                             // entries in queue[head:] of dropped streams
}

var _ mcp.EventStore = (*EventStore)(nil)

type eventLog struct {
	session, stream string
	first           int      // stream index of data[0]
	data            [][]byte // events not yet purged
	dead            bool     // removed from the store; its queue entries are stale
}

type queued struct {
	log  *eventLog
	size int
}

// NewEventStore returns a store that holds at most maxBytes (at least 64 KiB).
func NewEventStore(maxBytes int) *EventStore {
	return &EventStore{maxBytes: max(maxBytes, 64<<10), sessions: map[string]map[string]*eventLog{}}
}

// Open implements mcp.EventStore.
func (s *EventStore) Open(_ context.Context, sessionID, streamID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logFor(sessionID, streamID)
	return nil
}

// logFor returns the log of a stream, creating it. Requires s.mu.
func (s *EventStore) logFor(sessionID, streamID string) *eventLog {
	streams, ok := s.sessions[sessionID]
	if !ok {
		streams = map[string]*eventLog{}
		s.sessions[sessionID] = streams
	}
	l, ok := streams[streamID]
	if !ok {
		l = &eventLog{session: sessionID, stream: streamID}
		streams[streamID] = l
		s.nBytes += streamOverhead
	}
	return l
}

// Append implements mcp.EventStore.
func (s *EventStore) Append(_ context.Context, sessionID, streamID string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logFor(sessionID, streamID)
	size := len(data) + eventOverhead
	l.data = append(l.data, data)
	s.queue = append(s.queue, queued{log: l, size: size})
	s.nBytes += size
	s.purge(l)
	return nil
}

// After implements mcp.EventStore.
func (s *EventStore) After(_ context.Context, sessionID, streamID string, index int) iter.Seq2[[]byte, error] {
	s.mu.Lock()
	var (
		out [][]byte
		err error
	)
	l, ok := s.sessions[sessionID][streamID]
	switch start := index + 1 - l.firstOr0(); {
	case !ok:
		err = fmt.Errorf("mcpserver: no events kept for stream %q of session %q: %w", streamID, sessionID, mcp.ErrEventsPurged)
	case start < 0:
		err = fmt.Errorf("mcpserver: events after %d of stream %q were purged: %w", index, streamID, mcp.ErrEventsPurged)
	case start < len(l.data):
		out = slices.Clone(l.data[start:])
	}
	s.mu.Unlock()
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range out {
			if !yield(d, nil) {
				return
			}
		}
	}
}

func (l *eventLog) firstOr0() int {
	if l == nil {
		return 0
	}
	return l.first
}

// SessionClosed implements mcp.EventStore: the session's events go at once.
func (s *EventStore) SessionClosed(_ context.Context, sessionID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.sessions[sessionID] {
		s.drop(l)
	}
	delete(s.sessions, sessionID)
	s.compact()
	return nil
}

// drop removes l's remaining events and bookkeeping from the byte count and
// marks its queue entries stale. Requires s.mu; the caller unlinks l.
func (s *EventStore) drop(l *eventLog) {
	for _, d := range l.data {
		s.nBytes -= len(d) + eventOverhead
	}
	s.stale += len(l.data)
	s.nBytes -= streamOverhead
	l.data, l.dead = nil, true
}

// purge removes the oldest events until the store fits, never the event just
// appended to keep (so an event larger than the bound is still delivered).
// Requires s.mu.
func (s *EventStore) purge(keep *eventLog) {
	for s.nBytes > s.maxBytes && s.head < len(s.queue) {
		q := s.queue[s.head]
		if q.log == keep && len(keep.data) == 1 {
			break
		}
		s.queue[s.head] = queued{}
		s.head++
		l := q.log
		if l.dead {
			s.stale--
			continue
		}
		l.data[0] = nil
		l.data = l.data[1:]
		l.first++
		s.nBytes -= q.size
		if len(l.data) == 0 && l != keep {
			// Nothing left to replay: forget the stream.
			s.drop(l)
			delete(s.sessions[l.session], l.stream)
			if len(s.sessions[l.session]) == 0 {
				delete(s.sessions, l.session)
			}
		}
	}
	s.compact()
}

// compact reclaims the consumed part of the queue and the entries of
// dropped streams, so that the queue stays proportional to the events held.
// Requires s.mu.
func (s *EventStore) compact() {
	if live := len(s.queue) - s.head; s.stale > 1024 && s.stale > live/2 {
		kept := s.queue[:0]
		for _, q := range s.queue[s.head:] {
			if !q.log.dead {
				kept = append(kept, q)
			}
		}
		clear(s.queue[len(kept):])
		s.queue, s.head, s.stale = kept, 0, 0
		return
	}
	if s.head > 1024 && s.head > len(s.queue)/2 {
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue = s.queue[:n]
		s.head = 0
	}
}

// Stats reports the bytes charged and the number of streams and events held.
func (s *EventStore) Stats() (bytes, streams, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions {
		streams += len(ss)
		for _, l := range ss {
			events += len(l.data)
		}
	}
	return s.nBytes, streams, events
}
