// Package conntest checks, in tests, that an HTTP target's connection pool
// keeps its connections (decision 0016) in a way a busy machine cannot
// break.
//
// Counting new connections alone cannot tell a pool that churns from one
// that is slow: net/http's transport closes a connection after a call,
// instead of keeping it, when it has the answer but has not yet heard that
// the request was written (it waits 50 ms for that), and on a loaded
// machine the writing goroutine can be descheduled that long. The pool
// then dials a replacement. So the checks here follow each connection a
// call was done with, through a client trace on the calls: taken back by
// the pool, turned away by it (churn: the pool had no room), or dropped by
// the transport without being offered (the case above, or a failed call).
// Only a turned-away connection is churn; whatever the load, the pool holds
// no more than its limit, and every connection beyond the limit replaced
// one that was closed.
package conntest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"ticketrelay/testkit/testwait"
)

// Trace follows the connections of the calls made with its Context.
type Trace struct {
	mu      sync.Mutex
	got     int      // connections handed to a call
	reused  int      // of which had carried a call before
	put     int      // taken back by the idle pool after a call
	refused []string // turned away by the idle pool, and why
}

// Context is ctx with t tracing every HTTP call made under it (hooks
// already in ctx, and those added below it, still run).
func (tr *Trace) Context(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			tr.got++
			if info.Reused {
				tr.reused++
			}
		},
		PutIdleConn: func(err error) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			if err != nil {
				tr.refused = append(tr.refused, err.Error())
				return
			}
			tr.put++
		},
	})
}

// Conns counts the connections a test server is given and sees closed.
// Install Hook as the server's http.Server.ConnState.
type Conns struct {
	mu             sync.Mutex
	opened, closed int
}

// Hook is an http.Server.ConnState.
func (c *Conns) Hook(_ net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew:
		c.opened++
	case http.StateClosed, http.StateHijacked:
		c.closed++
	}
}

// Counts is how many connections the server was given, and saw closed.
func (c *Conns) Counts() (opened, closed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, c.closed
}

// Pool is what CheckPool checks: the calls traced by Trace went to the
// server counted by Server, through a pool of at most Limit connections,
// whose dialer's metrics are Opened (counter) and Open (gauge).
type Pool struct {
	Limit        int
	Trace        *Trace
	Server       *Conns
	Opened, Open func() float64
}

// CheckPool fails t unless, once the calls are done, the pool kept its
// connections: none turned away, connections reused, no more than Limit
// left open, the metrics equal to what the server saw, and maxGauge (the
// Open gauge's highest reading while calls ran) above Limit only by
// connections being closed: the transport frees a connection's place just
// before it closes the socket.
func CheckPool(t testing.TB, p Pool, maxGauge float64) {
	t.Helper()
	// The server learns of a connection when it accepts it and of a close
	// when it reads the end: wait for it to catch up with the client.
	var opened, closed int
	testwait.For(t, 10*time.Second, "the server to have seen every connection the metrics count, and every close", func() bool {
		opened, closed = p.Server.Counts()
		return float64(opened) == p.Opened() && float64(opened-closed) == p.Open()
	})
	tr := p.Trace
	tr.mu.Lock()
	defer tr.mu.Unlock()
	dropped := tr.got - tr.put - len(tr.refused)
	t.Logf("%d calls got a connection (%d reused); the pool took back %d, turned away %d, the transport dropped %d; the server saw %d connections, %d closed; gauge at most %v",
		tr.got, tr.reused, tr.put, len(tr.refused), dropped, opened, closed, maxGauge)
	if len(tr.refused) > 0 {
		t.Errorf("the pool turned away %d connections after their calls (connection churn), first: %s", len(tr.refused), tr.refused[0])
	}
	if tr.reused == 0 || tr.put == 0 {
		t.Errorf("%d of %d calls reused a connection and %d connections went back to the pool, want connections kept and reused",
			tr.reused, tr.got, tr.put)
	}
	if opened-closed > p.Limit {
		t.Errorf("%d connections open after the calls (%d opened, %d closed), want at most %d", opened-closed, opened, closed, p.Limit)
	}
	if maxGauge < 1 || maxGauge > float64(p.Limit+closed) {
		t.Errorf("open-connections gauge read %v at most during the calls, want 1..%d (the limit, plus the %d connections closed)",
			maxGauge, p.Limit+closed, closed)
	}
}
