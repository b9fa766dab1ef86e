package mcphttp

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// keepalive pings the sessions that hold a standalone SSE stream (the GET
// stream) open, and closes a session only after Failures consecutive pings
// went unanswered while its stream was open.
//
// The SDK's own keepalive (ServerOptions.KeepAlive) pings every session and,
// by default, closes it on the first failure; a server→client ping can only
// travel on the GET stream, so it fails for every client that never opens
// one, and such a client would lose its session at the first tick. Here a
// session without an open GET stream is not pinged at all: nothing can reach
// it, and the idle session timeout takes care of it.
type keepalive struct {
	srv      *mcp.Server
	interval time.Duration
	failures int
	log      *slog.Logger

	mu       sync.Mutex
	sessions map[string]*kaSession // by session ID, while a GET stream is or was open

	stop chan struct{}
	done chan struct{}
}

type kaSession struct {
	open  int // GET streams being served
	fails int // consecutive failed pings (owned by the loop)
}

func newKeepalive(srv *mcp.Server, interval time.Duration, failures int, log *slog.Logger) *keepalive {
	k := &keepalive{srv: srv, interval: interval, failures: max(failures, 1), log: log,
		sessions: map[string]*kaSession{}, stop: make(chan struct{}), done: make(chan struct{})}
	go k.loop()
	return k
}

// streamOpen records a GET stream of sessionID being served; call the
// returned function when it ends. Only a live session's ID may come here
// (Handler checks it against its sessions): the ID is kept as a map key
// until the session ends, and a client must not be able to park arbitrary
// header values in memory.
func (k *keepalive) streamOpen(sessionID string) func() {
	k.mu.Lock()
	s := k.sessions[sessionID]
	if s == nil {
		s = &kaSession{}
		k.sessions[sessionID] = s
	}
	s.open++
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		s.open--
		k.mu.Unlock()
	}
}

// forget drops what is kept about a session that ended.
func (k *keepalive) forget(sessionID string) {
	k.mu.Lock()
	delete(k.sessions, sessionID)
	k.mu.Unlock()
}

func (k *keepalive) close() {
	close(k.stop)
	<-k.done
}

func (k *keepalive) loop() {
	defer close(k.done)
	t := time.NewTicker(k.interval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.tick()
		}
	}
}

// tick pings, concurrently, every live session with an open GET stream and
// waits for the answers (each bounded by half the interval).
func (k *keepalive) tick() {
	live := map[string]*mcp.ServerSession{}
	for ss := range k.srv.Sessions() {
		if id := ss.ID(); id != "" {
			live[id] = ss
		}
	}
	type probe struct {
		id string
		ss *mcp.ServerSession
		s  *kaSession
	}
	var probes []probe
	k.mu.Lock()
	for id, s := range k.sessions {
		ss, ok := live[id]
		switch {
		case !ok: // the session ended
			delete(k.sessions, id)
		case s.open == 0: // nothing can reach the client now: no ping, no failure
			s.fails = 0
		default:
			probes = append(probes, probe{id, ss, s})
		}
	}
	k.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), k.interval/2)
			err := p.ss.Ping(ctx, nil)
			cancel()
			if err == nil {
				p.s.fails = 0
				return
			}
			p.s.fails++
			if p.s.fails < k.failures {
				k.log.Warn("keepalive ping failed", "session_id", p.id, "consecutive", p.s.fails, "threshold", k.failures, "err", err)
				return
			}
			k.log.Warn("keepalive: closing unresponsive session", "session_id", p.id, "consecutive", p.s.fails, "err", err)
			p.ss.Close()
		})
	}
	wg.Wait()
}
