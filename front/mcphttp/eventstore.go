package mcphttp

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
//
// A resumption gets exactly the events after the index it names, or
// mcp.ErrEventsPurged (the SDK answers 400) when any of them is gone: never a
// gap, never events at the wrong index. The SDK numbers the events of a stream
// itself (0, 1, 2, ... in the order of Append), so the store must know each
// stream's next index for as long as it stores events of that stream; an
// event for a stream it no longer knows is not stored at all (its index is
// unknown), and resuming that stream reports the purge.
//
// Its memory is bounded. Every stream that has had an event is charged
// streamOverhead, and each event its bytes plus eventOverhead, against
// MaxBytes; the charges sit in one queue, oldest first, and the oldest go
// first. The bookkeeping of a stream is one entry of that queue: when it comes
// up while the stream still holds events it goes back to the end of the queue
// (those events are newer and go first); when it comes up after all the
// stream's events were purged, the stream is forgotten. So a stream whose
// events were purged still knows its next index (an answer that comes later
// is stored at its true index) until everything stored when its events began
// to go has gone too, and empty streams are evicted like everything else:
// they can never hold the store over its bound.
//
// Streams opened but never appended to (every session's standalone stream
// until the server sends on it, and the calls of protocols before 2025-11-25
// until their first message) are not charged against MaxBytes but capped
// separately, at MaxBytes/streamOverhead of them, the oldest evicted first.
// Why: there is one per live stream of the SDK, which already holds far more
// for it, so with many idle sessions their charge would crowd all events out
// of the store; and evicting one early costs more than its few bytes: the SDK
// replays the standalone stream with After(-1) on every GET, which must then
// fail. The separate cap still bounds them against a flood of sessions.
//
// SessionClosed frees everything of a session at once.
//
// The SDK's MemoryEventStore bounds only the event bytes: its per-stream
// entries (one per call) live until the session ends, so a long session grows
// without bound. This store does not.
type EventStore struct {
	mu        sync.Mutex
	maxBytes  int
	maxUnused int
	nBytes    int                             // charged: every live entry of queue[head:]
	sessions  map[string]map[string]*eventLog // session ID → stream ID → log
	queue     []queued                        // every charge (events, stream bookkeeping), oldest first
	head      int                             // queue[head:] are the entries not yet purged
	stale     int                             // entries in queue[head:] of dropped logs

	unused     []*eventLog // logs never appended to, oldest first; may hold entries no longer unused
	unusedHead int         // unused[unusedHead:] are the entries not yet evicted
	nUnused    int         // logs that are live and never appended to
}

var _ mcp.EventStore = (*EventStore)(nil)

type eventLog struct {
	session, stream string
	first           int      // stream index of data[0]; the next index when data is empty
	data            [][]byte // events not yet purged
	charged         bool     // has had an event: streamOverhead charged, one stream entry queued
	dead            bool     // removed from the store; its queue entries are stale
}

type queued struct {
	log    *eventLog
	size   int
	stream bool // the log's bookkeeping rather than one of its events
}

// NewEventStore returns a store that holds at most maxBytes (at least 64 KiB)
// of events and bookkeeping of streams that had events, plus at most
// maxBytes/streamOverhead streams that never had any.
func NewEventStore(maxBytes int) *EventStore {
	maxBytes = max(maxBytes, 64<<10)
	return &EventStore{maxBytes: maxBytes, maxUnused: maxBytes / streamOverhead, sessions: map[string]map[string]*eventLog{}}
}

// Open implements mcp.EventStore: the stream's next index is 0.
func (s *EventStore) Open(_ context.Context, sessionID, streamID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	streams, ok := s.sessions[sessionID]
	if !ok {
		streams = map[string]*eventLog{}
		s.sessions[sessionID] = streams
	}
	if _, ok := streams[streamID]; ok {
		return nil
	}
	l := &eventLog{session: sessionID, stream: streamID}
	streams[streamID] = l
	s.unused = append(s.unused, l)
	s.nUnused++
	s.evictUnused()
	return nil
}

// Append implements mcp.EventStore. An event for a stream the store does not
// know (never opened, its session closed, or forgotten after all its events
// were purged) is dropped: its index is unknown, so it cannot be replayed
// correctly, and After reports ErrEventsPurged for that stream.
func (s *EventStore) Append(_ context.Context, sessionID, streamID string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.sessions[sessionID][streamID]
	if !ok {
		return nil
	}
	if !l.charged {
		l.charged = true
		s.nUnused--
		s.push(queued{log: l, size: streamOverhead, stream: true})
	}
	l.data = append(l.data, data)
	s.push(queued{log: l, size: len(data) + eventOverhead})
	s.purge(l)
	return nil
}

// push charges q and queues it. Requires s.mu.
func (s *EventStore) push(q queued) {
	s.queue = append(s.queue, q)
	s.nBytes += q.size
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
		err = fmt.Errorf("mcphttp: no events kept for stream %q of session %q: %w", streamID, sessionID, mcp.ErrEventsPurged)
	case start < 0:
		err = fmt.Errorf("mcphttp: events after %d of stream %q were purged: %w", index, streamID, mcp.ErrEventsPurged)
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
	s.compactUnused()
	return nil
}

// drop removes l's remaining events and bookkeeping from the counts and marks
// its queue entries stale. Requires s.mu; the caller unlinks l.
func (s *EventStore) drop(l *eventLog) {
	if l.charged {
		for _, d := range l.data {
			s.nBytes -= len(d) + eventOverhead
		}
		s.nBytes -= streamOverhead
		s.stale += len(l.data) + 1 // its events and its stream entry
	} else {
		s.nUnused--
	}
	l.data, l.dead = nil, true
}

// forget removes a log that holds nothing from the store. Requires s.mu.
func (s *EventStore) forget(l *eventLog) {
	l.dead = true
	delete(s.sessions[l.session], l.stream)
	if len(s.sessions[l.session]) == 0 {
		delete(s.sessions, l.session)
	}
}

// purge removes the oldest charges until the store fits, never the event just
// appended to keep (so an event larger than the bound is still delivered).
// Requires s.mu.
func (s *EventStore) purge(keep *eventLog) {
	for s.nBytes > s.maxBytes && s.head < len(s.queue) {
		q := s.queue[s.head]
		l := q.log
		if l == keep && !q.stream && len(keep.data) == 1 {
			break
		}
		s.queue[s.head] = queued{}
		s.head++
		switch {
		case l.dead:
			s.stale--
		case q.stream && len(l.data) > 0:
			// Its events are newer than this entry and go first; the
			// stream's next index must stay known while it holds any.
			s.queue = append(s.queue, q)
		case q.stream:
			// All its events were purged and it has waited a full turn
			// since: forget it. A resumption of it now fails.
			s.nBytes -= q.size
			s.forget(l)
		default: // the oldest event of l
			l.data[0] = nil
			l.data = l.data[1:]
			l.first++
			s.nBytes -= q.size
		}
	}
	s.compact()
}

// evictUnused forgets the oldest never-appended-to logs beyond the cap.
// Requires s.mu.
func (s *EventStore) evictUnused() {
	for s.nUnused > s.maxUnused && s.unusedHead < len(s.unused) {
		l := s.unused[s.unusedHead]
		s.unused[s.unusedHead] = nil
		s.unusedHead++
		if l.dead || l.charged {
			continue
		}
		s.nUnused--
		s.forget(l)
	}
	s.compactUnused()
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

// compactUnused keeps the list of unused logs proportional to their number:
// most logs leave it at once (a 2025-11-25 call appends its priming event
// right after Open). Requires s.mu.
func (s *EventStore) compactUnused() {
	if len(s.unused)-s.unusedHead <= 2*s.nUnused+1024 {
		return
	}
	kept := s.unused[:0]
	for _, l := range s.unused[s.unusedHead:] {
		if !l.dead && !l.charged {
			kept = append(kept, l)
		}
	}
	clear(s.unused[len(kept):])
	s.unused, s.unusedHead = kept, 0
}

// Stats reports the bytes charged against the bound and the number of
// streams (charged or not) and events held.
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
