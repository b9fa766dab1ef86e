package natscluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// sniffTimeout bounds how long a proxy waits for the first line of a route
// connection (the soliciting server's CONNECT) before it gives up on it.
const sniffTimeout = 5 * time.Second

// maxConnectLine bounds the route CONNECT line a proxy reads; a real one is
// a few hundred bytes.
const maxConnectLine = 64 << 10

// fabric is the route network of the cluster: one TCP proxy in front of
// every node's route listener. Every node's routes, and the route address it
// advertises to the others, point at proxies, so every route connection
// passes through the proxy of the node that accepted it. A connection's
// other end is the server that solicited it; the proxy learns which one from
// the route CONNECT (its "name" is the soliciting server's id), so cutting a
// node closes the connections it accepted and those it solicited.
type fabric struct {
	mu     sync.Mutex
	cut    map[int]bool   // nodes whose routes are cut
	ids    map[string]int // server id (every incarnation) → node index
	links  map[*link]struct{}
	closed bool
}

// link is one proxied route connection.
type link struct {
	target int    // node whose route listener accepted it
	srcID  string // server id of the soliciting node; "" if not known
	client net.Conn
	server net.Conn
}

func (l *link) close() {
	l.client.Close()
	l.server.Close()
}

func newFabric() *fabric {
	return &fabric{cut: map[int]bool{}, ids: map[string]int{}, links: map[*link]struct{}{}}
}

// source is the node that solicited l, or -1. Caller holds f.mu.
func (f *fabric) source(l *link) int {
	if i, ok := f.ids[l.srcID]; ok && l.srcID != "" {
		return i
	}
	return -1
}

// severed reports whether l touches a cut node. Caller holds f.mu.
func (f *fabric) severed(l *link) bool {
	return f.cut[l.target] || (f.source(l) >= 0 && f.cut[f.source(l)])
}

// learn records that node i runs (or ran) with server id id, and closes
// connections that node solicited while it was cut and not yet known.
func (f *fabric) learn(i int, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids[id] = i
	f.sweepLocked()
}

// setCut cuts (or heals) node i's routes.
func (f *fabric) setCut(i int, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cut {
		f.cut[i] = true
	} else {
		delete(f.cut, i)
	}
	f.sweepLocked()
}

func (f *fabric) isCut(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut[i]
}

func (f *fabric) sweepLocked() {
	for l := range f.links {
		if f.severed(l) {
			delete(f.links, l)
			l.close()
		}
	}
}

// add registers l unless it touches a cut node (or the fabric is closed).
func (f *fabric) add(l *link) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.severed(l) {
		return false
	}
	f.links[l] = struct{}{}
	return true
}

func (f *fabric) remove(l *link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.links, l)
}

// close closes every connection; the proxies' listeners are closed by
// their owners.
func (f *fabric) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for l := range f.links {
		delete(f.links, l)
		l.close()
	}
}

// proxy forwards connections from its listener to one node's route
// listener. It outlives the node's restarts, so the node's peers keep their
// route addresses.
type proxy struct {
	f       *fabric
	target  int
	backend string // the node's own route listener, host:port
	ln      net.Listener
	wg      sync.WaitGroup
}

func startProxy(f *fabric, target int, backend string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{f: f, target: target, backend: backend, ln: ln}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the others dial to reach the node's routes.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	p.ln.Close()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// serve reads the soliciting server's CONNECT, refuses the connection if
// either end is cut, and otherwise pipes it to the node until either side
// closes or the fabric cuts it.
func (p *proxy) serve(client net.Conn) {
	if p.f.isCut(p.target) {
		client.Close()
		return
	}
	_ = client.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(client, 4096)
	first, err := readLine(br, maxConnectLine)
	if err != nil {
		client.Close()
		return
	}
	_ = client.SetReadDeadline(time.Time{})
	server, err := net.DialTimeout("tcp", p.backend, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{target: p.target, srcID: connectName(first), client: client, server: server}
	if !p.f.add(l) {
		l.close()
		return
	}
	defer p.f.remove(l)
	done := make(chan struct{}, 2)
	go func() {
		// What the client sent before the server's first byte, then the rest.
		_, _ = server.Write(first)
		_, _ = io.Copy(server, br)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, server)
		done <- struct{}{}
	}()
	<-done
	l.close()
	<-done
}

// readLine reads through the first '\n', at most limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull) && len(line) < limit:
			continue
		default:
			return nil, err
		}
	}
}

// connectName is the "name" of a route CONNECT line (the soliciting
// server's id), or "" if line is not one.
func connectName(line []byte) string {
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("CONNECT "))
	if !ok {
		return ""
	}
	var c struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(rest, &c) != nil {
		return ""
	}
	return c.Name
}
