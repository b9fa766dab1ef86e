package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ticketrelay/delivery/downstream/downstreamtest"
)

// serveDir serves a receiver as run does, on the store in dir, and returns
// its /tickets URL and a function that stops it (server and store).
func serveDir(t *testing.T, dir string) (string, func()) {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	st, kept, err := openStore(filepath.Join(dir, "tickets.jsonl"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := NewReceiver(secret, srv.URL+"/tickets", time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), st.Create)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kept {
		rcv.Restore(k.Key, k.digest, k.ID)
	}
	mux.Handle("POST /tickets", rcv)
	mux.HandleFunc("GET /tickets/{id}", st.ServeTicket)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Close()
			st.Close()
		}
	}
	t.Cleanup(stop)
	return srv.URL + "/tickets", stop
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// After a restart, a resend of a ticket created before it gets the first
// answer and stores nothing, and new tickets go on from the last id; each
// answer's url serves its ticket.
func TestRestartKeepsKeysAndIDs(t *testing.T) {
	dir := t.TempDir()
	url, stop := serveDir(t, dir)
	d := downstreamtest.NewDelivery("req-before-restart")
	first, err := target(t, url, secret).Deliver(context.Background(), d)
	if err != nil || first.ExternalID != "T-1" {
		t.Fatalf("first delivery: %+v, %v; want T-1", first, err)
	}
	resp, err := http.Get(first.URL)
	if err != nil {
		t.Fatal(err)
	}
	var got record
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || got.ID != "T-1" || got.Ticket.RequestID != d.Ticket.RequestID {
		t.Fatalf("GET %s: %d %+v %v; want 200 with ticket T-1 of %s", first.URL, resp.StatusCode, got, err, d.Ticket.RequestID)
	}
	stop()

	url, _ = serveDir(t, dir)
	d.Attempt = 2
	again, err := target(t, url, secret).Deliver(context.Background(), d)
	if err != nil || again.ExternalID != "T-1" {
		t.Fatalf("resend after a restart: %+v, %v; want the first answer, T-1", again, err)
	}
	other := d
	other.Ticket.Title = "another title"
	if _, err := target(t, url, secret).Deliver(context.Background(), other); err == nil {
		t.Fatal("the key of a ticket created before the restart, with another body, was accepted")
	}
	next, err := target(t, url, secret).Deliver(context.Background(), downstreamtest.NewDelivery("req-after-restart"))
	if err != nil || next.ExternalID != "T-2" {
		t.Fatalf("a new ticket after a restart: %+v, %v; want T-2", next, err)
	}
	if n := lines(t, filepath.Join(dir, "tickets.jsonl")); n != 2 {
		t.Fatalf("%d tickets kept; want 2", n)
	}
	resp, err = http.Get(strings.TrimSuffix(url, "/tickets") + "/tickets/T-9")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET of an unknown ticket: %d; want 404", resp.StatusCode)
	}
}

// A last line cut short (a crash while writing it, before its answer) is
// dropped at the next start, and the next ticket takes its id.
func TestPartialLastLineIsDropped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tickets.jsonl")
	url, stop := serveDir(t, dir)
	if _, err := target(t, url, secret).Deliver(context.Background(), downstreamtest.NewDelivery("req-kept")); err != nil {
		t.Fatal(err)
	}
	stop()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"T-2","key":"req-cut`)
	f.Close()

	url, _ = serveDir(t, dir)
	r, err := target(t, url, secret).Deliver(context.Background(), downstreamtest.NewDelivery("req-next"))
	if err != nil || r.ExternalID != "T-2" {
		t.Fatalf("after a cut line: %+v, %v; want T-2", r, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("req-cut")) || lines(t, path) != 2 {
		t.Fatalf("tickets.jsonl after the restart:\n%s\nwant two whole lines, the cut one gone", b)
	}
}

// The secret file is made once and read after: both sides get the same
// secret however often either starts. A WEBHOOK_SECRET that differs from
// the file is refused, and a malformed one makes no file.
func TestSecretFileIsMadeOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	s1, made, err := loadSecret(path, "")
	if err != nil || !made {
		t.Fatalf("first start: made %v, %v", made, err)
	}
	if _, err := signingKey(s1); err != nil {
		t.Fatalf("made secret %q: %v", s1, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	s2, made, err := loadSecret(path, "")
	if err != nil || made || s2 != s1 {
		t.Fatalf("second start: %q made %v, %v; want the first secret, read", s2, made, err)
	}
	if s3, _, err := loadSecret(path, s1); err != nil || s3 != s1 {
		t.Fatalf("WEBHOOK_SECRET equal to the file: %q, %v", s3, err)
	}
	if _, _, err := loadSecret(path, secret); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("WEBHOOK_SECRET differing from the file: %v; want a refusal", err)
	}

	other := filepath.Join(t.TempDir(), "secret")
	if _, _, err := loadSecret(other, "not-a-secret"); err == nil {
		t.Fatal("a malformed WEBHOOK_SECRET was accepted")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("a malformed WEBHOOK_SECRET left a secret file: %v", err)
	}
	if s, made, err := loadSecret(other, secret); err != nil || !made || s != secret {
		t.Fatalf("first start with WEBHOOK_SECRET set: %q made %v, %v; want it kept", s, made, err)
	}
}

// A receiver that cannot bind fails with the address and never says it is
// listening.
func TestBindFailureIsTheOnlyLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs bytes.Buffer
	err = run([]string{"-listen", ln.Addr().String(), "-dir", t.TempDir()}, func(string) string { return "" }, io.Discard,
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err == nil || !strings.Contains(err.Error(), "listen on "+ln.Addr().String()) {
		t.Fatalf("run on a port in use: %v; want an error naming the address", err)
	}
	if strings.Contains(logs.String(), "listening") {
		t.Fatalf("logged before failing to bind:\n%s", logs.String())
	}
}
