package mcpserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// subjectOf is the authenticated subject of a request ("" without auth).
func subjectOf(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}

// sessionLimit counts the live sessions of the stateful SDK handler, in
// all and per subject, and refuses a request that would open one beyond
// either bound before the SDK sees it, so that nothing is kept for it. A
// request that may open a session holds a slot while it is served; if a
// session came of it, the slot is the session's until the session ends
// (timeout, DELETE, keepalive: ServerSession.Wait returns), else it is
// given back at once.
type sessionLimit struct {
	srv        *mcp.Server
	max        int // ≤ 0: no bound
	perSubject int // ≤ 0: no bound
	log        *slog.Logger
	logs       *logGate
	refused    func(string)
	ended      func(id string) // called after a session ended, if set

	mu        sync.Mutex
	sessions  map[string]string // live session ID → subject
	pending   int               // requests being served that may open a session
	bySubject map[string]int    // live + pending, per subject
}

func newSessionLimit(srv *mcp.Server, total, perSubject int, now func() time.Time, log *slog.Logger, refused func(string)) *sessionLimit {
	return &sessionLimit{srv: srv, max: total, perSubject: perSubject, log: log, logs: newLogGate(logEvery, maxTrackedClients, now),
		refused: refused, sessions: map[string]string{}, bySubject: map[string]int{}}
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
	sub, ok := s.sessions[id]
	return ok && sub == subject
}

// serveNew serves a request that may open a session, if a slot is free.
func (s *sessionLimit) serveNew(w http.ResponseWriter, r *http.Request, next http.Handler) {
	subject := subjectOf(r)
	s.mu.Lock()
	total, mine := len(s.sessions)+s.pending, s.bySubject[subject]
	full := s.max > 0 && total >= s.max
	fullSubject := subject != "" && s.perSubject > 0 && mine >= s.perSubject
	if !full && !fullSubject {
		s.pending++
		s.bySubject[subject]++
	}
	s.mu.Unlock()
	if full || fullSubject {
		s.refuse(w, r, subject, full)
		return
	}
	// The session is counted, and its GET stream accepted, as soon as the
	// SDK answers with its ID: before the client can read that answer.
	sw := &sessionWriter{ResponseWriter: w}
	sw.hook = func() { sw.settled = s.settle(subject, w.Header().Get("Mcp-Session-Id"), false) }
	defer func() {
		sw.once.Do(func() {}) // the hook has run, or will not
		if !sw.settled {
			s.settle(subject, w.Header().Get("Mcp-Session-Id"), true)
		}
	}()
	next.ServeHTTP(sw, r)
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

func (s *sessionLimit) refuse(w http.ResponseWriter, r *http.Request, subject string, full bool) {
	s.refused(RefusedSessionLimit)
	key, status, msg := "", http.StatusServiceUnavailable, fmt.Sprintf(
		"too many sessions: this server holds its maximum of %d live sessions; end unused ones (HTTP DELETE) or retry later. Nothing was done.", s.max)
	if !full {
		key, status, msg = subject, http.StatusTooManyRequests, fmt.Sprintf(
			"too many sessions: subject %q holds its maximum of %d live sessions; end unused ones (HTTP DELETE) or retry later. Nothing was done.", subject, s.perSubject)
	}
	if pass, held := s.logs.pass(key); pass {
		s.log.Warn("new session refused: session limit reached", "subject", subject, "per_subject", !full,
			"max", s.max, "max_per_subject", s.perSubject, "refused_since_last_warning", held, "remote", r.RemoteAddr)
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(SessionLimitRetryAfter/time.Second)))
	writeRPCError(w, status, CodeRateLimited, msg)
}

// settle turns the slot of a request into the slot of the session it
// opened (id, from the answer's Mcp-Session-Id) and reports true; with
// final (the request was served), it gives the slot back if there is no
// such session. Without final, it does nothing then and reports false.
func (s *sessionLimit) settle(subject, id string, final bool) bool {
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
		s.release(subject)
		s.mu.Unlock()
		return false
	}
	s.sessions[id] = subject
	s.mu.Unlock()
	go func() {
		ss.Wait()
		s.mu.Lock()
		delete(s.sessions, id)
		s.release(subject)
		s.mu.Unlock()
		if s.ended != nil {
			s.ended(id)
		}
	}()
	return true
}

// release gives back one slot of subject; s.mu is held.
func (s *sessionLimit) release(subject string) {
	if s.bySubject[subject]--; s.bySubject[subject] <= 0 {
		delete(s.bySubject, subject)
	}
}
