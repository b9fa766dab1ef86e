package torture

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// cutConn resets its TCP connection a moment after a tools/call request
// has been written on it: a raw cut mid-call, as a dropped network would
// do, whatever the HTTP and MCP layers above think.
type cutConn struct {
	net.Conn
	after time.Duration
	armed atomic.Bool
}

var toolsCall = []byte(`"tools/call"`)

func (c *cutConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if bytes.Contains(b, toolsCall) && c.armed.CompareAndSwap(true, false) {
		time.AfterFunc(c.after, func() {
			if tc, ok := c.Conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST, not FIN
			}
			c.Conn.Close()
		})
	}
	return n, err
}

// newHTTPClient returns a client with its own connections. With cut >= 0,
// the connection that carries a tools/call is reset cut after it is written.
func newHTTPClient(cut time.Duration) (*http.Client, *http.Transport) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil || cut < 0 {
				return conn, err
			}
			cc := &cutConn{Conn: conn, after: cut}
			cc.armed.Store(true)
			return cc, nil
		},
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     5 * time.Second,
	}
	return &http.Client{Transport: tr}, tr
}
