package forwarder_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/internal/archetype"
	"ticketrelay/request"
	"ticketrelay/store/outbox"
)

// Requests waiting out a long Retry-After stay among their target's
// unacknowledged messages; they must not hold up the target's other
// requests, however many there are.
func TestRetryingRequestsDoNotBlockTheTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	var refuse atomic.Bool
	refuse.Store(true)
	api.hook = func(context.Context, int, downstream.Delivery) (behaviour, error) {
		if refuse.Load() {
			return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 503, RetryAfter: time.Hour, Err: errors.New("come back in an hour")}
		}
		return act, nil
	}
	cfg := testConfig()
	cfg.Workers = 2 // the consumer's limit was 4×workers
	e.startForwarder(t, cfg, api)
	var waiting []string
	for range 12 {
		waiting = append(waiting, e.create(t, api.name))
	}
	for _, id := range waiting {
		e.waitStatus(t, id, request.StatusRetrying)
	}
	refuse.Store(false)
	e.waitStatus(t, e.create(t, api.name), request.StatusDelivered)
}

// The wait an API asks for is capped: a Retry-After far in the future must
// neither overflow the retry time nor park the request for ever.
func TestRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	api.hook = func(context.Context, int, downstream.Delivery) (behaviour, error) {
		return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 503, RetryAfter: 100 * 365 * 24 * time.Hour, Err: errors.New("come back in a century")}
	}
	e.startForwarder(t, testConfig(), api)
	before := time.Now()
	id := e.create(t, api.name)
	st := e.waitStatus(t, id, request.StatusRetrying)
	if st.NextAttemptAt == nil || st.NextAttemptAt.Before(before) || st.NextAttemptAt.After(time.Now().Add(24*time.Hour+time.Minute)) {
		t.Fatalf("next_attempt_at %v: want within a day of now", st.NextAttemptAt)
	}
}

// A consumer deleted while the forwarder runs is created again: its target
// does not go quiet until the next restart.
func TestDeletedConsumerIsCreatedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	e.startForwarder(t, testConfig(), api)
	e.waitStatus(t, e.create(t, api.name), request.StatusDelivered)
	if err := e.js.DeleteConsumer(context.Background(), "TICKETS", forwarder.ConsumerName(api.name)); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, e.create(t, api.name), request.StatusDelivered)
	if n := len(api.Calls()); n != 2 {
		t.Errorf("%d calls, want 2: the first request is settled and must not be sent again", n)
	}
}

// A copy of a message that comes back before its retry time (a consumer
// created again starts from the first message of the stream; here a second
// copy published under another message id) waits for that time: the
// API's Retry-After holds.
func TestEarlyCopyWaitsForItsRetryTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := newKeyedAPI("tracker")
	const retryAfter = 1500 * time.Millisecond
	api.hook = func(_ context.Context, n int, _ downstream.Delivery) (behaviour, error) {
		if n == 1 {
			return failBefore, &downstream.Error{Class: downstream.Transient, StatusCode: 503, RetryAfter: retryAfter, Err: errors.New("come back later")}
		}
		return act, nil
	}
	e.startForwarder(t, testConfig(), api)
	id := e.create(t, api.name)
	st := e.waitStatus(t, id, request.StatusRetrying)
	e.publishRaw(t, outbox.SubjectFor(api.name), "copy-"+id, e.payload(t, id))
	e.waitStatus(t, id, request.StatusDelivered)
	calls := api.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d calls, want 2", len(calls))
	}
	if calls[1].Start.Before(*st.NextAttemptAt) {
		t.Errorf("second call at %v, before the retry time %v the API asked for", calls[1].Start, *st.NextAttemptAt)
	}
}

// tcpProxy forwards connections to target until cut; while blocked it
// refuses new ones: a network between the dispatcher and its NATS server.
type tcpProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	blocked bool
	conns   []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.blocked {
				p.mu.Unlock()
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) block(b bool) { p.mu.Lock(); p.blocked = b; p.mu.Unlock() }

// A consumer deleted while the dispatcher was disconnected from the server
// (it never hears of it) is found gone and created again.
func TestConsumerDeletedWhileDisconnected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := newTCPProxy(t, e.nc.ConnectedAddr())
	nc, err := nats.Connect("nats://"+p.ln.Addr().String(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	api := newKeyedAPI("tracker")
	cfg := testConfig()
	cfg.ConsumerCheck = 200 * time.Millisecond
	runInBackground(t, "forwarder", forwarder.New(archetype.Archetype{Logger: e.log, Metrics: e.m}, cfg, js, e.l, []downstream.Target{api}).Run)
	e.waitStatus(t, e.create(t, api.name), request.StatusDelivered)

	p.block(true)
	p.cut()
	waitFor(t, 5*time.Second, "disconnected", func() bool { return !nc.IsConnected() })
	if err := e.js.DeleteConsumer(context.Background(), "TICKETS", forwarder.ConsumerName(api.name)); err != nil {
		t.Fatal(err)
	}
	p.block(false)
	waitFor(t, 10*time.Second, "reconnected", func() bool { return nc.IsConnected() })
	e.waitStatus(t, e.create(t, api.name), request.StatusDelivered)
}
