package mcphttp

import (
	"container/list"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"ticketrelay/internal/loggate"
)

// subjectOf is the authenticated subject of a request ("" without auth).
func subjectOf(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}

// Words passed to Config.Evicted: why this layer closed a session that
// had made no call since its initialize.
const (
	EvictedUnusedTimeout = "unused_timeout" // no call within UnusedSessionTimeout
	EvictedTableFull     = "table_full"     // the oldest unused session, to admit a new one at MaxSessions
	EvictedClientFull    = "client_full"    // the client's oldest unused session, to admit its new one at its share
)

// EvictedReasons are the words of Evicted, for a metric to export at 0.
var EvictedReasons = []string{EvictedUnusedTimeout, EvictedTableFull, EvictedClientFull}

// sessionLimit counts the live sessions of the stateful SDK handler, in
// all and per client (the subject with tokens, else the address), and
// refuses a request that would open one beyond either bound before the SDK
// sees it, so that nothing is kept for it. A request that may open a
// session holds a slot while it is served; if a session came of it, the
// slot is the session's until the session ends (timeout, DELETE,
// keepalive, eviction: ServerSession.Wait returns), else it is given back
// at once.
//
// A session is unused until it makes a call after its initialize. Opening
// a session costs one request; an unused one would otherwise hold its slot
// for the whole idle timeout, so a client looping on initialize would fill
// the table in a second and lock every other client out for that long.
// Unused sessions are therefore the first to go: one that makes no call
// within unusedTimeout is closed, and a new session that finds its bound
// full takes the slot of the oldest unused session within that bound (its
// client's own for the client's share, anyone's for the table) rather than
// being refused. Only when every session within the bound has made a call
// is the new one refused. A session that made a call is never closed by
// this layer.
type sessionLimit struct {
	srv           *mcp.Server
	max           int // ≤ 0: no bound
	perSubject    int // ≤ 0: no bound
	perAddress    int // ≤ 0: no bound
	unusedTimeout time.Duration
	log           *slog.Logger
	logs          *loggate.Gate
	refused       func(string)
	evicted       func(string)
	ended         func(id string) // called after a session ended, if set

	mu       sync.Mutex
	sessions map[string]*liveSession // by session ID
	pending  int                     // requests being served that may open a session
	byClient map[string]int          // live + pending, per client key
	unused   *list.List              // of *liveSession that made no call yet, oldest first
	unusedBy map[string]*list.List   // the same, per client key
}

// liveSession is a session sessionLimit holds a slot for.
type liveSession struct {
	id, subject, client string
	ss                  *mcp.ServerSession
	elem, clientElem    *list.Element // in unused and unusedBy[client] while unused
	timer               *time.Timer   // closes it if still unused
	gone                bool          // its slot was taken back (evicted, or ended)
}

type sessionBounds struct {
	total, perSubject, perAddress int
	unusedTimeout                 time.Duration
}

func newSessionLimit(srv *mcp.Server, b sessionBounds, now func() time.Time, log *slog.Logger, refused, evicted func(string)) *sessionLimit {
	return &sessionLimit{srv: srv, max: b.total, perSubject: b.perSubject, perAddress: b.perAddress, unusedTimeout: b.unusedTimeout,
		log: log, logs: loggate.New(loggate.Every, maxTrackedClients, now), refused: refused, evicted: evicted,
		sessions: map[string]*liveSession{}, byClient: map[string]int{}, unused: list.New(), unusedBy: map[string]*list.List{}}
}

func (s *sessionLimit) live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// owns reports whether id is a live session opened by subject.
func (s *sessionLimit) owns(id, subject string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.sessions[id]
	return ok && ls.subject == subject
}

// used records that session id, if it is subject's, made a call: it is
// no longer unused, so never evicted.
func (s *sessionLimit) used(id, subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls, ok := s.sessions[id]; ok && ls.subject == subject && ls.elem != nil {
		s.unlistUnused(ls)
	}
}

// unlistUnused takes ls off the unused lists and stops its timer; s.mu is held.
func (s *sessionLimit) unlistUnused(ls *liveSession) {
	if ls.elem == nil {
		return
	}
	s.unused.Remove(ls.elem)
	l := s.unusedBy[ls.client]
	l.Remove(ls.clientElem)
	if l.Len() == 0 {
		delete(s.unusedBy, ls.client)
	}
	ls.elem, ls.clientElem = nil, nil
	if ls.timer != nil {
		ls.timer.Stop()
	}
}

// take takes ls's slot back at once, before its session has ended; s.mu
// is held. The caller closes ls.ss once s.mu is released.
func (s *sessionLimit) take(ls *liveSession) {
	s.unlistUnused(ls)
	delete(s.sessions, ls.id)
	s.release(ls.client)
	ls.gone = true
}

// clientOf is the key of r's share and its bound: the subject with tokens,
// else the address (as the rate limit counts clients).
func (s *sessionLimit) clientOf(r *http.Request) (key string, bound int) {
	if sub := subjectOf(r); sub != "" {
		return "subject " + sub, s.perSubject
	}
	return "ip " + ipKey(r.RemoteAddr), s.perAddress
}

// serveNew serves a request that may open a session, if a slot is free or
// can be freed by evicting an unused session.
func (s *sessionLimit) serveNew(w http.ResponseWriter, r *http.Request, next http.Handler) {
	subject := subjectOf(r)
	client, bound := s.clientOf(r)
	var victims []*liveSession
	var victimWhy []string
	refuseFull, refuseClient := false, false
	s.mu.Lock()
	if bound > 0 && s.byClient[client] >= bound {
		if l := s.unusedBy[client]; l != nil {
			v := l.Front().Value.(*liveSession)
			s.take(v)
			victims, victimWhy = append(victims, v), append(victimWhy, EvictedClientFull)
		} else {
			refuseClient = true
		}
	}
	if !refuseClient && s.max > 0 && len(s.sessions)+s.pending >= s.max {
		if e := s.unused.Front(); e != nil {
			v := e.Value.(*liveSession)
			s.take(v)
			victims, victimWhy = append(victims, v), append(victimWhy, EvictedTableFull)
		} else {
			refuseFull = true
		}
	}
	if !refuseClient && !refuseFull {
		s.pending++
		s.byClient[client]++
	}
	s.mu.Unlock()
	for i, v := range victims {
		s.evict(v, victimWhy[i], r.RemoteAddr)
	}
	if refuseClient || refuseFull {
		s.refuse(w, r, subject, client, refuseFull)
		return
	}
	// The session is counted, and its GET stream accepted, as soon as the
	// SDK answers with its ID: before the client can read that answer.
	sw := &sessionWriter{ResponseWriter: w}
	sw.hook = func() { sw.settled = s.settle(subject, client, w.Header().Get("Mcp-Session-Id"), false) }
	defer func() {
		sw.once.Do(func() {}) // the hook has run, or will not
		if !sw.settled {
			s.settle(subject, client, w.Header().Get("Mcp-Session-Id"), true)
		}
	}()
	next.ServeHTTP(sw, r)
}

// closeAll ends every live session (the handler is closing). Each
// session's watcher (settle) then gives its slot back.
func (s *sessionLimit) closeAll() {
	s.mu.Lock()
	live := make([]*mcp.ServerSession, 0, len(s.sessions))
	for _, ls := range s.sessions {
		live = append(live, ls.ss)
	}
	s.mu.Unlock()
	for _, ss := range live {
		ss.Close()
	}
}

// evict closes v, whose slot was taken back, and reports why.
func (s *sessionLimit) evict(v *liveSession, why, remote string) {
	v.ss.Close()
	s.evicted(why)
	if pass, held := s.logs.Pass("evict " + why); pass {
		s.log.Info("closed a session that made no call since its initialize", "reason", why, "client", v.client,
			"unused_timeout", s.unusedTimeout, "closed_since_last_line", held, "for", remote)
	}
}

// sessionWriter calls hook once, before the first byte of the answer
// leaves (WriteHeader, Write or Flush).
type sessionWriter struct {
	http.ResponseWriter
	once    sync.Once
	hook    func()
	settled bool // hook turned the slot into a session's
}

func (w *sessionWriter) WriteHeader(code int) {
	w.once.Do(w.hook)
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionWriter) Write(b []byte) (int, error) {
	w.once.Do(w.hook)
	return w.ResponseWriter.Write(b)
}

func (w *sessionWriter) Flush() {
	w.once.Do(w.hook)
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *sessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *sessionLimit) refuse(w http.ResponseWriter, r *http.Request, subject, client string, full bool) {
	reason, key, status, msg := RefusedSessionLimit, "", http.StatusServiceUnavailable, fmt.Sprintf(
		"too many sessions: this server holds its maximum of %d live sessions, every one of them in use; end unused ones (HTTP DELETE) or retry later. Nothing was done.", s.max)
	switch {
	case full:
	case subject != "":
		reason, key, status, msg = RefusedClientSessionLimit, client, http.StatusTooManyRequests, fmt.Sprintf(
			"too many sessions: subject %q holds its maximum of %d live sessions, every one of them in use; end unused ones (HTTP DELETE) or retry later. Nothing was done.", subject, s.perSubject)
	default:
		reason, key, status, msg = RefusedClientSessionLimit, client, http.StatusTooManyRequests, fmt.Sprintf(
			"too many sessions: address %s holds its maximum of %d live sessions, every one of them in use; end unused ones (HTTP DELETE) or retry later. Nothing was done.", strings.TrimPrefix(client, "ip "), s.perAddress)
	}
	s.refused(reason)
	if pass, held := s.logs.Pass(key); pass {
		s.log.Warn("new session refused: session limit reached", "client", client, "per_client", !full,
			"max", s.max, "max_per_subject", s.perSubject, "max_per_address", s.perAddress, "refused_since_last_warning", held, "remote", r.RemoteAddr)
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(SessionLimitRetryAfter/time.Second)))
	writeRPCError(w, status, CodeRateLimited, msg)
}

// settle turns the slot of a request into the slot of the session it
// opened (id, from the answer's Mcp-Session-Id) and reports true; with
// final (the request was served), it gives the slot back if there is no
// such session. Without final, it does nothing then and reports false.
func (s *sessionLimit) settle(subject, client, id string, final bool) bool {
	var ss *mcp.ServerSession
	if id != "" {
		for c := range s.srv.Sessions() {
			if c.ID() == id {
				ss = c
				break
			}
		}
	}
	if ss == nil && !final {
		return false
	}
	s.mu.Lock()
	s.pending--
	if ss == nil {
		s.release(client)
		s.mu.Unlock()
		return false
	}
	ls := &liveSession{id: id, subject: subject, client: client, ss: ss}
	s.sessions[id] = ls
	ls.elem = s.unused.PushBack(ls)
	l := s.unusedBy[client]
	if l == nil {
		l = list.New()
		s.unusedBy[client] = l
	}
	ls.clientElem = l.PushBack(ls)
	if s.unusedTimeout > 0 {
		ls.timer = time.AfterFunc(s.unusedTimeout, func() { s.expire(ls) })
	}
	s.mu.Unlock()
	go func() {
		ss.Wait()
		s.mu.Lock()
		if !ls.gone {
			s.take(ls)
		}
		s.mu.Unlock()
		if s.ended != nil {
			s.ended(id)
		}
	}()
	return true
}

// expire closes ls if it is still unused once unusedTimeout has passed.
func (s *sessionLimit) expire(ls *liveSession) {
	s.mu.Lock()
	if ls.gone || ls.elem == nil {
		s.mu.Unlock()
		return
	}
	s.take(ls)
	s.mu.Unlock()
	s.evict(ls, EvictedUnusedTimeout, "")
}

// release gives back one slot of client; s.mu is held.
func (s *sessionLimit) release(client string) {
	if s.byClient[client]--; s.byClient[client] <= 0 {
		delete(s.byClient, client)
	}
}
