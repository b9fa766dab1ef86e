package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// hostProxy is the load balancer of a multi-host run: a reverse proxy in
// front of every host's mcp-front. A request without an MCP session (an
// initialize) goes to the next host in turn; a request of a session goes
// to the host that opened it (sessions live in one front's memory). The
// callers open a session per call, so a retry after a cut answer lands on
// another host, as behind a load balancer. It records which host each
// tools/call went to.
type hostProxy struct {
	ln  net.Listener
	srv *http.Server
	tr  *http.Transport
	h   *history

	mu       sync.Mutex
	backends []proxyBackend
	next     int
	sticky   map[string]int // Mcp-Session-Id → backend
}

type proxyBackend struct {
	name, addr string
	removed    bool
}

type backendKey struct{}

// sessionHeader is the streamable HTTP transport's session header.
const sessionHeader = "Mcp-Session-Id"

func startHostProxy(h *history) (*hostProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &hostProxy{ln: ln, h: h, sticky: map[string]int{},
		tr: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     5 * time.Second,
		}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i, _ := pr.In.Context().Value(backendKey{}).(int)
			pr.SetURL(&url.URL{Scheme: "http", Host: p.addrOf(i)})
		},
		Transport:     p.tr,
		FlushInterval: -1, // SSE answers pass at once
		ModifyResponse: func(res *http.Response) error {
			if sid := res.Header.Get(sessionHeader); sid != "" {
				i, _ := res.Request.Context().Value(backendKey{}).(int)
				p.mu.Lock()
				p.sticky[sid] = i
				p.mu.Unlock()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The host is down or cut the connection: what a load balancer
			// answers.
			http.Error(w, "torture proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: p.handler(rp), ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// URL is the endpoint the callers use.
func (p *hostProxy) URL() string { return "http://" + p.ln.Addr().String() + "/mcp" }

// add appends a host's front; its index is the host's.
func (p *hostProxy) add(name, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = append(p.backends, proxyBackend{name: name, addr: addr})
}

// remove takes a host out for good: no new session goes to it.
func (p *hostProxy) remove(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends[i].removed = true
}

func (p *hostProxy) addrOf(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backends[i].addr
}

// pick chooses the backend of a request: its session's, else the next
// host in turn.
func (p *hostProxy) pick(sid string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.sticky[sid]; ok && sid != "" {
		return i, true
	}
	for range p.backends {
		i := p.next % len(p.backends)
		p.next++
		if !p.backends[i].removed {
			return i, true
		}
	}
	return 0, false
}

func (p *hostProxy) handler(rp *httputil.ReverseProxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get(sessionHeader)
		i, ok := p.pick(sid)
		if !ok {
			http.Error(w, "torture proxy: no host left", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodDelete && sid != "" {
			p.mu.Lock()
			delete(p.sticky, sid)
			p.mu.Unlock()
		}
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, "torture proxy: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			p.route(i, body)
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), backendKey{}, i)))
	})
}

// route records the host a tools/call went to.
func (p *hostProxy) route(i int, body []byte) {
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
		return
	}
	id, _ := msg.Params.Arguments["request_id"].(string)
	title, _ := msg.Params.Arguments["title"].(string)
	p.mu.Lock()
	host := p.backends[i].name
	p.mu.Unlock()
	e := Event{Kind: KindRoute, RequestID: id, Component: host, Detail: msg.Params.Name}
	if isConflictTitle(title) {
		e.Mode = ModeConflict
	}
	p.h.add(e)
}

func (p *hostProxy) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	p.tr.CloseIdleConnections()
	if errors.Is(err, context.DeadlineExceeded) {
		return p.srv.Close()
	}
	return err
}
