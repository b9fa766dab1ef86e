package rest_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/internal/rest"
	"ticketrelay/delivery/downstream/webhook"
)

// A receiver that echoes one value of the URL's query alone ("unknown
// token …") does not get it into the error.
func TestQueryValueEchoedAloneIsRedacted(t *testing.T) {
	const secret = "HOOKQUERYSECRET0009"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "unknown token %s", r.URL.Query().Get("token"))
	}))
	t.Cleanup(srv.Close)
	wh, err := webhook.New(webhook.Config{Name: "wu", URL: srv.URL + "/hook?token=" + secret + "&channel=ops"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wh.Deliver(context.Background(), downstreamtest.NewDelivery("req-q"))
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "unknown token") {
		t.Fatalf("error %v: want the answer without the token", err)
	}
}

// The reason phrase of a redirect answer is the server's text too: no
// control character of it reaches the error.
func TestRedirectReasonPhraseIsCleaned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 301 Moved \x1b]0;pwned\x07\x1b[2J\r\nLocation: /x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	c := rest.NewClient(nil, nil)
	req, err := c.NewJSONRequest(context.Background(), http.MethodPost, "http://"+ln.Addr().String()+"/hook", map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(req)
	if err == nil || !strings.Contains(err.Error(), "301 Moved") {
		t.Fatalf("error %v: want the 301 named", err)
	}
	for _, r := range err.Error() {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			t.Fatalf("control character %U in the error %q", r, err)
		}
	}
}
