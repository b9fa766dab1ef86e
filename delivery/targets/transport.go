package targets

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ticketrelay/metrics"
)

// defaultConns is the connections per host of an HTTP target when Open is
// not told the worker count: the forwarder's default workers per API
// (forwarder.DefaultWorkers).
const defaultConns = 64

// idleConnTimeout closes a connection that has carried nothing for this
// long. It is shorter than the keep-alive timeouts of the common load
// balancers and servers in front of APIs (60 s, 75 s), so that we close an
// idle connection before the server does: a request sent on a connection
// the server is closing fails after it may have been read, and toward a
// target without a dedupe key that is an attempt of unknown outcome.
const idleConnTimeout = 30 * time.Second

// Option tunes what Open builds.
type Option func(*openConfig)

type openConfig struct {
	conns   int
	metrics *metrics.Dispatcher
}

// WithWorkers sizes each HTTP target's connection pool to n concurrent
// calls (the forwarder's workers per target): n connections per host are
// kept open between calls, and no more than n are ever open to one host,
// so a backlog opens at most n connections however long it is. n <= 0
// keeps the default (64, the forwarder's default for an API).
func WithWorkers(n int) Option {
	return func(c *openConfig) {
		if n > 0 {
			c.conns = n
		}
	}
}

// WithMetrics counts each HTTP target's connections (open, and opened in
// all) at the dialer.
func WithMetrics(m *metrics.Dispatcher) Option {
	return func(c *openConfig) { c.metrics = m }
}

// newTransport is the HTTP transport of one target: its own pool, so that
// one target's connections and limits never touch another's, sized to the
// target's concurrent calls. Go's default transport keeps 2 idle
// connections per host: with more workers than that, most calls dialed a
// new connection (a TLS handshake, against a real API) and closed it after.
//
// What the default transport does beyond that is kept: the proxy from the
// environment, the dial and TLS handshake timeouts. HTTP/2 is negotiated
// (TLS ALPN) where the API offers it; a custom dialer turns that off unless
// ForceAttemptHTTP2 is set. Over HTTP/2 one connection carries every call.
func newTransport(target string, conns int, m *metrics.Dispatcher) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	dial := d.DialContext
	if m != nil {
		dial = countingDialer(d.DialContext, m.ConnectionsOpen.WithLabelValues(target), m.ConnectionsOpened.WithLabelValues(target))
	}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          0, // no overall cap: each host's is MaxIdleConnsPerHost
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// countingDialer wraps dial so that every connection it opens is counted
// when dialed (opened, open) and when closed (open), whoever closes it.
// Counting at the dialer makes the figures exact: they are the sockets, not
// an estimate from requests. The transport releases a connection's slot
// under MaxConnsPerHost just before it closes the socket, so while one
// connection closes the gauge may briefly read one above the limit.
func countingDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), open prometheus.Gauge, opened prometheus.Counter) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		opened.Inc()
		open.Inc()
		return &countedConn{Conn: c, open: open}, nil
	}
}

// countedConn lowers the open gauge once, on its first Close.
type countedConn struct {
	net.Conn
	open prometheus.Gauge
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.open.Dec)
	return err
}
