package mcphttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"ticketrelay/request"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// after collects what After yields: the events, and the error it ends with.
// An error after events is a partial result, which the contract forbids.
func after(t *testing.T, s *EventStore, session, stream string, index int) ([][]byte, error) {
	t.Helper()
	var got [][]byte
	for d, err := range s.After(context.Background(), session, stream, index) {
		if err != nil {
			if len(got) > 0 {
				t.Fatalf("After(%s/%s, %d): error %v after %d events", session, stream, index, err, len(got))
			}
			return nil, err
		}
		got = append(got, d)
	}
	return got, nil
}

// wantEvents fails unless After(index) yields exactly want, without error.
func wantEvents(t *testing.T, s *EventStore, session, stream string, index int, want ...[]byte) {
	t.Helper()
	got, err := after(t, s, session, stream, index)
	if err != nil {
		t.Fatalf("After(%s/%s, %d): %v, want %q", session, stream, index, err, want)
	}
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("After(%s/%s, %d) = %q, want %q", session, stream, index, got, want)
	}
}

// wantPurged fails unless After(index) reports ErrEventsPurged.
func wantPurged(t *testing.T, s *EventStore, session, stream string, index int) {
	t.Helper()
	got, err := after(t, s, session, stream, index)
	if !errors.Is(err, mcp.ErrEventsPurged) {
		t.Fatalf("After(%s/%s, %d) = %q, %v; want ErrEventsPurged", session, stream, index, got, err)
	}
}

func purged(s *EventStore, session, stream string, index int) bool {
	for _, err := range s.After(context.Background(), session, stream, index) {
		if err != nil {
			return true
		}
	}
	return false
}

// checkStore checks the bookkeeping: every byte charged is in the queue
// (so it can be evicted), each stream that had events has exactly one
// bookkeeping entry and one entry per event it holds, the counters match,
// and the queues stay proportional to what they hold.
func checkStore(t *testing.T, s *EventStore) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	charged, stale := 0, 0
	streamEntries, eventEntries := map[*eventLog]int{}, map[*eventLog]int{}
	for _, q := range s.queue[s.head:] {
		if q.log.dead {
			stale++
			continue
		}
		if s.sessions[q.log.session][q.log.stream] != q.log {
			t.Fatalf("queued entry of %s/%s, which the store no longer has", q.log.session, q.log.stream)
		}
		charged += q.size
		if q.stream {
			streamEntries[q.log]++
		} else {
			eventEntries[q.log]++
		}
	}
	if charged != s.nBytes {
		t.Fatalf("%d bytes charged, but the queue holds %d", s.nBytes, charged)
	}
	if stale != s.stale {
		t.Fatalf("stale count %d, queue has %d stale entries", s.stale, stale)
	}
	unused := 0
	for sid, streams := range s.sessions {
		if len(streams) == 0 {
			t.Fatalf("session %s kept without streams", sid)
		}
		for id, l := range streams {
			if l.dead || l.session != sid || l.stream != id {
				t.Fatalf("log %s/%s: dead %v, names %s/%s", sid, id, l.dead, l.session, l.stream)
			}
			if !l.charged {
				unused++
				if len(l.data) != 0 || l.first != 0 || streamEntries[l]+eventEntries[l] != 0 {
					t.Fatalf("unused log %s/%s holds %d events, first %d, %d queue entries", sid, id, len(l.data), l.first, streamEntries[l]+eventEntries[l])
				}
				continue
			}
			if streamEntries[l] != 1 || eventEntries[l] != len(l.data) {
				t.Fatalf("log %s/%s: %d bookkeeping entries (want 1), %d event entries for %d events",
					sid, id, streamEntries[l], eventEntries[l], len(l.data))
			}
		}
	}
	if unused != s.nUnused || s.nUnused > s.maxUnused {
		t.Fatalf("%d unused logs, counted %d, cap %d", unused, s.nUnused, s.maxUnused)
	}
	if live := len(s.queue) - s.head; s.stale > 1024 && s.stale > live/2 {
		t.Fatalf("queue not compacted: %d stale of %d", s.stale, live)
	}
	if s.head > 1024 && s.head > len(s.queue)/2 {
		t.Fatalf("queue not compacted: head %d of %d", s.head, len(s.queue))
	}
	if n := len(s.unused) - s.unusedHead; n > 2*s.nUnused+1024 {
		t.Fatalf("unused list holds %d entries for %d unused logs", n, s.nUnused)
	}
}

// fillUntil stores other calls' events (a priming event and a 1000-byte
// answer each, on streams of session "other") until cond holds.
func fillUntil(t *testing.T, s *EventStore, what string, cond func() bool) {
	t.Helper()
	ctx := context.Background()
	answer := bytes.Repeat([]byte("x"), 1000)
	for i := 0; !cond(); i++ {
		if i == 2000 {
			t.Fatalf("%s: not after %d other calls", what, i)
		}
		id := fmt.Sprintf("B%d", i)
		s.Open(ctx, "other", id)
		s.Append(ctx, "other", id, nil)
		s.Append(ctx, "other", id, answer)
		if b, _, _ := s.Stats(); b > s.maxBytes {
			t.Fatalf("store holds %d bytes > %d", b, s.maxBytes)
		}
	}
}

var (
	progress = []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`)
	answer   = []byte(`{"jsonrpc":"2.0","id":7,"result":{"final":true}}`)
)

// TestEventStorePurgedStreamKeepsItsIndex: other traffic purges every
// event of a call that is still running; the call's answer, stored later,
// keeps its true index (2), so a client that saw events 0 and 1 gets exactly
// the answer, and one that needs the purged events is told so.
func TestEventStorePurgedStreamKeepsItsIndex(t *testing.T) {
	ctx := context.Background()
	s := NewEventStore(64 << 10)
	s.Open(ctx, "S1", "A")
	s.Append(ctx, "S1", "A", nil)      // 0: priming
	s.Append(ctx, "S1", "A", progress) // 1
	fillUntil(t, s, "A's events purged", func() bool { return purged(s, "S1", "A", 0) })
	checkStore(t, s)

	s.Append(ctx, "S1", "A", answer) // 2: the answer
	wantEvents(t, s, "S1", "A", 1, answer)
	wantEvents(t, s, "S1", "A", 2)
	wantPurged(t, s, "S1", "A", 0)
	wantPurged(t, s, "S1", "A", -1)
	checkStore(t, s)
}

// TestEventStoreForgottenStreamIsNotRenumbered: other traffic goes on until
// the store forgets a running call's stream altogether. The answer that
// comes after must not be stored as event 0 of a new stream: every
// resumption of the stream either gets exactly the events after its index or
// ErrEventsPurged.
func TestEventStoreForgottenStreamIsNotRenumbered(t *testing.T) {
	ctx := context.Background()
	s := NewEventStore(64 << 10)
	s.Open(ctx, "S1", "A")
	s.Append(ctx, "S1", "A", nil)      // 0: priming
	s.Append(ctx, "S1", "A", progress) // 1
	fillUntil(t, s, "A forgotten", func() bool { return purged(s, "S1", "A", 1) })
	_, streamsBefore, eventsBefore := s.Stats()

	s.Append(ctx, "S1", "A", progress) // 2
	s.Append(ctx, "S1", "A", answer)   // 3
	all := [][]byte{nil, progress, progress, answer}
	for index := -1; index < len(all); index++ {
		got, err := after(t, s, "S1", "A", index)
		if err != nil && !errors.Is(err, mcp.ErrEventsPurged) {
			t.Fatalf("After(%d): %v", index, err)
		}
		if err == nil && !slices.EqualFunc(got, all[index+1:], bytes.Equal) {
			t.Errorf("After(%d) = %q without error, want %q or ErrEventsPurged", index, got, all[index+1:])
		}
	}
	// Nothing was kept for the stream: the events of unknown index are not stored.
	if _, streams, events := s.Stats(); streams != streamsBefore || events != eventsBefore {
		t.Errorf("after appending to a forgotten stream: %d streams, %d events; before %d, %d", streams, events, streamsBefore, eventsBefore)
	}
	checkStore(t, s)
}

// TestEventStoreIdleSessionsDoNotStarveCalls: many sessions that never send
// anything (each has its standalone stream open) must not use up the budget,
// and a call's events stay resumable.
func TestEventStoreIdleSessionsDoNotStarveCalls(t *testing.T) {
	ctx := context.Background()
	const budget = 64 << 10
	s := NewEventStore(budget)
	for i := range 400 {
		s.Open(ctx, fmt.Sprintf("idle%d", i), "")
	}
	if b, _, _ := s.Stats(); b > budget/2 {
		t.Errorf("400 idle sessions hold %d bytes of a %d budget", b, budget)
	}
	s.Open(ctx, "X", "A")
	s.Append(ctx, "X", "A", nil)
	s.Append(ctx, "X", "A", progress)
	s.Append(ctx, "X", "A", answer)
	wantEvents(t, s, "X", "A", 0, progress, answer)
	wantEvents(t, s, "X", "A", -1, nil, progress, answer)
	// The idle sessions are still there: a GET of their standalone stream
	// replays from the start (After(-1)) and gets nothing, not an error.
	for i := range 400 {
		wantEvents(t, s, fmt.Sprintf("idle%d", i), "", -1)
	}
	if b, _, _ := s.Stats(); b > budget {
		t.Errorf("store holds %d bytes > %d", b, budget)
	}
	checkStore(t, s)
}

// TestEventStoreEmptyStreamsAreEvictable: streams whose events were all
// purged are evicted in turn, so a long session of many calls (or many
// sessions each pinged once) stays within the budget, and the newest call is
// always resumable.
func TestEventStoreEmptyStreamsAreEvictable(t *testing.T) {
	ctx := context.Background()
	const budget = 64 << 10
	s := NewEventStore(budget)
	for i := range 3000 {
		sid := fmt.Sprintf("S%d", i)
		s.Open(ctx, sid, "")
		s.Append(ctx, sid, "", []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)) // a keepalive ping
		s.Open(ctx, sid, "call")
		s.Append(ctx, sid, "call", nil)
		s.Append(ctx, sid, "call", answer)
		if b, _, _ := s.Stats(); b > budget {
			t.Fatalf("after %d sessions: %d bytes > %d", i+1, b, budget)
		}
		wantEvents(t, s, sid, "call", 0, answer)
		if i%100 == 0 {
			checkStore(t, s)
		}
	}
	if _, streams, _ := s.Stats(); streams > 2*budget/streamOverhead {
		t.Errorf("%d streams kept", streams)
	}
	wantPurged(t, s, "S0", "call", 0)
	checkStore(t, s)
}

// TestEventStoreCapsUnusedStreams: streams never appended to are capped
// separately; beyond the cap the oldest go, and what is later sent on them is
// not stored under a wrong index.
func TestEventStoreCapsUnusedStreams(t *testing.T) {
	ctx := context.Background()
	s := NewEventStore(64 << 10)
	limit := s.maxUnused
	for i := range limit + 100 {
		s.Open(ctx, fmt.Sprintf("S%d", i), "")
	}
	if b, streams, _ := s.Stats(); streams != limit || b != 0 {
		t.Fatalf("%d unused streams opened: %d kept (cap %d), %d bytes charged", limit+100, streams, limit, b)
	}
	checkStore(t, s)
	wantPurged(t, s, "S0", "", -1)
	s.Append(ctx, "S0", "", progress) // its index is 0, but the store cannot know
	wantPurged(t, s, "S0", "", -1)
	newest := fmt.Sprintf("S%d", limit+99)
	wantEvents(t, s, newest, "", -1)
	s.Append(ctx, newest, "", progress)
	wantEvents(t, s, newest, "", -1, progress)
	checkStore(t, s)
}

// TestEventStoreSessionClosedFreesAll: a closed session's streams go, used or
// not, and an event that races in after the close is not kept.
func TestEventStoreSessionClosedFreesAll(t *testing.T) {
	ctx := context.Background()
	s := NewEventStore(64 << 10)
	for i := range 50 {
		sid := fmt.Sprintf("S%d", i)
		s.Open(ctx, sid, "")
		for j := range 20 {
			id := fmt.Sprintf("c%d", j)
			s.Open(ctx, sid, id)
			s.Append(ctx, sid, id, nil)
			s.Append(ctx, sid, id, bytes.Repeat([]byte("y"), 300))
		}
		s.Open(ctx, sid, "running") // an old-protocol call: nothing sent yet
	}
	for i := range 50 {
		s.SessionClosed(ctx, fmt.Sprintf("S%d", i))
		checkStore(t, s)
	}
	s.Append(ctx, "S1", "", progress) // the SDK's Write racing with the close
	if b, streams, events := s.Stats(); b != 0 || streams != 0 || events != 0 {
		t.Errorf("after every session closed: %d bytes, %d streams, %d events", b, streams, events)
	}
	if s.nUnused != 0 {
		t.Errorf("%d unused logs counted after every session closed", s.nUnused)
	}
	wantPurged(t, s, "S1", "", -1)
}

// TestEventStoreMatchesModel runs random traffic against a model of what
// the SDK has sent on each stream (it numbers every event it appends, stored
// or not) and checks every resumption: exactly the events after the index,
// or ErrEventsPurged, never a gap or an event at a wrong index. The event
// just appended is always resumable, and the store stays within its budget.
func TestEventStoreMatchesModel(t *testing.T) {
	type key struct{ session, stream string }
	for seed := range uint64(3) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(seed, 7))
		const budget = 64 << 10
		s := NewEventStore(budget)
		sent := map[key][][]byte{}
		closed := map[string]bool{}
		var keys []key
		served, refused, lost := 0, 0, 0
		for op := range 15000 {
			switch r := rng.IntN(100); {
			case r < 12 || len(keys) == 0:
				k := key{fmt.Sprintf("s%d", rng.IntN(40)), fmt.Sprintf("c%d", op)}
				if rng.IntN(4) == 0 {
					k.stream = "" // the standalone stream
				}
				if closed[k.session] || sent[k] != nil {
					continue
				}
				s.Open(ctx, k.session, k.stream)
				sent[k] = [][]byte{}
				keys = append(keys, k)
			case r < 70:
				k := keys[rng.IntN(len(keys))]
				if closed[k.session] {
					continue
				}
				// Does the store still know the stream's next index?
				known := !purged(s, k.session, k.stream, len(sent[k])-1)
				d := fmt.Appendf(nil, "%s/%s/%d:%s", k.session, k.stream, len(sent[k]), strings.Repeat("z", rng.IntN(900)))
				s.Append(ctx, k.session, k.stream, d)
				sent[k] = append(sent[k], d)
				if known {
					wantEvents(t, s, k.session, k.stream, len(sent[k])-2, d)
				} else {
					lost++
					wantPurged(t, s, k.session, k.stream, len(sent[k])-2)
				}
			case r < 99:
				k := keys[rng.IntN(len(keys))]
				index := rng.IntN(len(sent[k])+1) - 1
				got, err := after(t, s, k.session, k.stream, index)
				switch {
				case errors.Is(err, mcp.ErrEventsPurged):
					refused++
				case err != nil:
					t.Fatalf("After: %v", err)
				case closed[k.session]:
					t.Fatalf("After(%v, %d) of a closed session = %q, want ErrEventsPurged", k, index, got)
				case !slices.EqualFunc(got, sent[k][index+1:], bytes.Equal):
					t.Fatalf("seed %d op %d: After(%v, %d) = %d events %.40q..., want %d events %.40q...",
						seed, op, k, index, len(got), got, len(sent[k][index+1:]), sent[k][index+1:])
				default:
					if len(got) > 0 {
						served++
					}
				}
			default:
				sid := fmt.Sprintf("s%d", rng.IntN(40))
				s.SessionClosed(ctx, sid)
				closed[sid] = true
			}
			if b, _, _ := s.Stats(); b > budget {
				t.Fatalf("seed %d op %d: %d bytes > %d", seed, op, b, budget)
			}
			if op%250 == 0 {
				checkStore(t, s)
			}
		}
		t.Logf("seed %d: %d resumptions served, %d refused; %d events sent on forgotten streams", seed, served, refused, lost)
		if served < 100 || refused < 100 || lost < 10 {
			t.Errorf("seed %d: the traffic does not exercise every case", seed)
		}
		checkStore(t, s)
	}
}

// TestResumeAfterPurgeIs400: a create waits for delivery; its stream drops
// after the first progress notification; other traffic then purges the
// call's events while it still waits. When the client resumes after the
// call has answered, it must get 400 (events purged), not an empty 200 that
// silently loses the answer.
func TestResumeAfterPurgeIs400(t *testing.T) {
	e := newTenv(t)
	returned := make(chan struct{})
	e.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method == "tools/call" {
				close(returned)
			}
			return res, err
		}
	})
	ts, h := e.serve(t, Config{EventStoreBytes: 64 << 10})
	c := &wire{t: t, url: ts.URL}
	c.initialize()

	rid := newRID()
	lastID := callThenDrop(t, c, rid, "purged while waiting", 30)
	streamID, _, _ := strings.Cut(lastID, "_")

	// Other clients' calls fill the store until it has forgotten the call's
	// stream, while the call still waits.
	other := &wire{t: t, url: ts.URL}
	other.initialize()
	store := h.EventStore()
	for i := 0; !purged(store, c.session, streamID, 1); i++ {
		if i == 3000 {
			t.Fatalf("the call's events are still kept after %d pings", i)
		}
		m := readResponse(t, other.do(other.req(http.MethodPost, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+10))))
		if m.Result == nil {
			t.Fatalf("ping: %+v", m)
		}
	}
	select {
	case <-returned:
		t.Fatal("the call returned before delivery")
	default:
	}

	// The ticket is delivered; the call sends its progress and its answer.
	waitFor(t, 5*time.Second, "the create to commit", func() bool { return e.tickets(t) == 1 })
	if err := e.l.RecordDelivery(context.Background(), request.Delivery{RequestID: rid, Target: "local",
		State: string(request.StatusDelivered), Attempts: 1, ExternalID: "EXT-7"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return after delivery")
	}

	get := c.req(http.MethodGet, nil)
	get.Header.Set("Last-Event-ID", lastID)
	resp := c.do(get)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		var events []string
		for s := newSSE(resp.Body); ; {
			ev, ok := s.next()
			if !ok {
				break
			}
			events = append(events, ev.id+" "+ev.data)
		}
		t.Fatalf("resume after purged events: HTTP %d with events %q, want 400", resp.StatusCode, events)
	}
}
