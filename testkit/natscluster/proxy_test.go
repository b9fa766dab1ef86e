package natscluster

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestConnectName(t *testing.T) {
	for line, want := range map[string]string{
		`CONNECT {"echo":true,"verbose":false,"name":"NDVU5HNIPOV","cluster":"ticketrelay"}` + "\r\n": "NDVU5HNIPOV",
		`INFO {"server_id":"X"}` + "\r\n": "",
		`CONNECT {not json}` + "\r\n":     "",
		"PING\r\n":                        "",
	} {
		if got := connectName([]byte(line)); got != want {
			t.Errorf("connectName(%q) = %q, want %q", line, got, want)
		}
	}
}

// TestProxyCutsBothEnds: a connection through node 1's proxy that node 0
// dialled is closed when either end is cut, and refused while one is.
func TestProxyCutsBothEnds(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }() // echo
		}
	}()
	f := newFabric()
	p, err := startProxy(f, 1, backend.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	defer f.close()
	f.learn(0, "ID0")

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, `CONNECT {"name":"ID0"}`+"\r\nhello\n"); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	for _, cut := range []int{0, 1} {
		c, r := dial()
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "CONNECT") {
			t.Fatalf("echo through the proxy: %q, %v", line, err)
		}
		if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
			t.Fatalf("echo through the proxy: %q, %v", line, err)
		}
		f.setCut(cut, true)
		if b, err := r.ReadString('\n'); err == nil {
			t.Fatalf("cut %d: the connection still carries %q", cut, b)
		}
		c.Close()
		c, r = dial()
		if b, err := r.ReadString('\n'); err == nil {
			t.Fatalf("cut %d: a new connection was let through: %q", cut, b)
		}
		c.Close()
		f.setCut(cut, false)
	}
	c, r := dial()
	defer c.Close()
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "CONNECT") {
		t.Fatalf("after Heal: %q, %v", line, err)
	}
}
