package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/local"
	"ticketrelay/testkit/powercut"
	"ticketrelay/ticket"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func now() time.Time { return t0 }

func delivery(id string) downstream.Delivery {
	return downstream.Delivery{
		Key:     downstream.Key("", id),
		Attempt: 1,
		Ticket: ticket.Ticket{
			Request: ticket.Request{RequestID: id, Tool: "create_ticket", Target: "local",
				Title: "Ticket " + id, Body: "body", Priority: "normal"},
			ID:        ticket.IDFor(id),
			CreatedAt: t0.Add(-time.Minute),
		},
	}
}

func open(t *testing.T, path string) *local.Target {
	t.Helper()
	tg, err := local.Open("local", path, now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// lines reads the file and decodes every line; it fails on a line without
// its newline.
func lines(t *testing.T, path string) []local.Line {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("file does not end with a newline: %q", b)
	}
	var out []local.Line
	for _, raw := range bytes.SplitAfter(b, []byte("\n")) {
		if len(raw) == 0 {
			continue
		}
		var l local.Line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		out = append(out, l)
	}
	return out
}

func deliver(t *testing.T, tg *local.Target, id string) downstream.Receipt {
	t.Helper()
	r, err := tg.Deliver(context.Background(), delivery(id))
	if err != nil {
		t.Fatalf("Deliver %s: %v", id, err)
	}
	return r
}

func receipt(path string, line int) downstream.Receipt {
	return downstream.Receipt{ExternalID: fmt.Sprintf("line-%d", line), URL: fmt.Sprintf("file://%s#L%d", path, line)}
}

func TestDeliverAppendsOneLinePerKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	tg := open(t, path)
	if tg.Name() != "local" || tg.Capabilities() != local.Capabilities || !tg.Capabilities().DedupeKey ||
		tg.Capabilities().Lookup != downstream.LookupConsistent {
		t.Fatalf("Name %q, Capabilities %+v", tg.Name(), tg.Capabilities())
	}

	r1 := deliver(t, tg, "req-1")
	if r1 != receipt(path, 1) {
		t.Fatalf("receipt = %+v", r1)
	}
	ls := lines(t, path)
	if len(ls) != 1 {
		t.Fatalf("%d lines after one delivery", len(ls))
	}
	want := delivery("req-1")
	if ls[0].Key != "req-1" || !ls[0].DeliveredAt.Equal(t0) || ls[0].Ticket.ID != want.Ticket.ID ||
		ls[0].Ticket.Title != want.Ticket.Title || ls[0].Ticket.RequestID != "req-1" {
		t.Fatalf("line = %+v", ls[0])
	}

	again := deliver(t, tg, "req-1")
	if again != r1 {
		t.Fatalf("second delivery of the same key = %+v, want the first receipt %+v", again, r1)
	}
	if n := len(lines(t, path)); n != 1 {
		t.Fatalf("%d lines after delivering the same key twice, want 1", n)
	}
	if r2 := deliver(t, tg, "req-2"); r2 != receipt(path, 2) {
		t.Fatalf("second key receipt = %+v", r2)
	}
	if n := len(lines(t, path)); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}

	got, ok, err := tg.Find(context.Background(), delivery("req-2"))
	if err != nil || !ok || got != receipt(path, 2) {
		t.Fatalf("Find(req-2) = %+v %v %v", got, ok, err)
	}
	if got, ok, err := tg.Find(context.Background(), delivery("req-3")); err != nil || ok || got != (downstream.Receipt{}) {
		t.Fatalf("Find(never delivered) = %+v %v %v", got, ok, err)
	}
}

func TestConcurrentDeliveriesOfOneKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	tg := open(t, path)
	var wg sync.WaitGroup
	receipts := make([]downstream.Receipt, 16)
	for i := range receipts {
		wg.Go(func() {
			r, err := tg.Deliver(context.Background(), delivery("req-same"))
			if err != nil {
				t.Error(err)
			}
			receipts[i] = r
		})
	}
	wg.Wait()
	for i, r := range receipts {
		if r != receipt(path, 1) {
			t.Errorf("delivery %d receipt %+v", i, r)
		}
	}
	if n := len(lines(t, path)); n != 1 {
		t.Fatalf("%d lines for one key delivered 16 times at once", n)
	}
}

func TestReopenIndexesExistingKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	tg, err := local.Open("local", path, now)
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, tg, "req-1")
	deliver(t, tg, "req-2")
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}

	tg = open(t, path)
	if got, ok, err := tg.Find(context.Background(), delivery("req-2")); err != nil || !ok || got != receipt(path, 2) {
		t.Fatalf("Find after reopen = %+v %v %v", got, ok, err)
	}
	if r := deliver(t, tg, "req-1"); r != receipt(path, 1) {
		t.Fatalf("redelivery after reopen = %+v, want line 1", r)
	}
	if r := deliver(t, tg, "req-3"); r != receipt(path, 3) {
		t.Fatalf("new key after reopen = %+v, want line 3", r)
	}
	ls := lines(t, path)
	if len(ls) != 3 || ls[0].Key != "req-1" || ls[1].Key != "req-2" || ls[2].Key != "req-3" {
		t.Fatalf("lines after reopen: %+v", ls)
	}
}

func TestTornLastLineIsCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	tg, err := local.Open("local", path, now)
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, tg, "req-1")
	tg.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of writing req-2's line, longer than the line
	// that will be written in its place.
	long := delivery("req-2").Ticket
	long.Body = strings.Repeat("x", 4096)
	full, err := json.Marshal(local.Line{Key: "req-2", DeliveredAt: t0, Ticket: long})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(full[:len(full)-10]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	tg = open(t, path)
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatalf("Open left %d bytes, want the %d bytes before the torn line", len(after), len(before))
	}
	if _, ok, _ := tg.Find(context.Background(), delivery("req-2")); ok {
		t.Fatal("the torn line's key was indexed")
	}
	if r := deliver(t, tg, "req-2"); r != receipt(path, 2) {
		t.Fatalf("delivery after the torn line = %+v, want line 2", r)
	}
	ls := lines(t, path)
	if len(ls) != 2 || ls[1].Key != "req-2" {
		t.Fatalf("lines = %+v", ls)
	}
}

func TestCorruptMiddleLineFailsOpen(t *testing.T) {
	for name, bad := range map[string]string{
		"not JSON":   "garbage\n",
		"no key":     `{"key":"","ticket":{}}` + "\n",
		"empty line": "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tickets.jsonl")
			good := func(id string) string {
				b, _ := json.Marshal(local.Line{Key: id, DeliveredAt: t0, Ticket: delivery(id).Ticket})
				return string(b) + "\n"
			}
			content := good("req-1") + bad + good("req-3")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			tg, err := local.Open("local", path, now)
			if err == nil {
				tg.Close()
				t.Fatal("Open accepted a corrupt middle line")
			}
			if !strings.Contains(err.Error(), "line 2") {
				t.Errorf("error %q does not name line 2", err)
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Errorf("a failed Open changed the file")
			}
		})
	}
}

// The receipt's URL is a valid file URL of the absolute path, whatever
// path Open was given: a relative data dir must not read as a host
// ("file://data/tickets.jsonl"), and characters a URL path escapes are
// escaped.
func TestReceiptURLIsAFileURL(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll(filepath.Join("data", "a b#c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{filepath.Join("data", "tickets.jsonl"), filepath.Join("data", "a b#c", "t?.jsonl")} {
		tg := open(t, rel)
		r := deliver(t, tg, "req-url-"+rel)
		abs := filepath.Join(dir, rel)
		u, err := url.Parse(r.URL)
		if err != nil {
			t.Fatalf("%s: URL %q does not parse: %v", rel, r.URL, err)
		}
		if u.Scheme != "file" || u.Host != "" || u.Path != filepath.ToSlash(abs) || u.Fragment != "L1" || u.RawQuery != "" {
			t.Errorf("%s: URL %q = scheme %q host %q path %q fragment %q, want file:// + %s + #L1",
				rel, r.URL, u.Scheme, u.Host, u.Path, u.Fragment, abs)
		}
		if !strings.HasPrefix(r.URL, "file:///") {
			t.Errorf("%s: URL %q does not start with file:///", rel, r.URL)
		}
		if f, ok, err := tg.Find(context.Background(), delivery("req-url-"+rel)); err != nil || !ok || f != r {
			t.Errorf("%s: Find = %+v, want the Deliver receipt %+v", rel, f, r)
		}
	}
}

// The file holds every ticket: it is created readable by its owner only.
func TestFileIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tickets.jsonl")
	deliver(t, open(t, path), "req-private")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Fatalf("mode %v, want 0600", m)
	}
}

// TestDeliveredTicketSurvivesPowerCut: a ticket Deliver answered for is in
// the file after a power cut, the file's name included when Open created
// it (testkit/powercut keeps a new file's entry only once its directory
// is synced).
func TestDeliveredTicketSurvivesPowerCut(t *testing.T) {
	pc := powercut.MountT(t, powercut.Options{})
	path := filepath.Join(pc.Mountpoint(), "tickets.jsonl")
	tg, err := local.Open("local", path, now)
	if err != nil {
		t.Fatal(err)
	}
	d := delivery("req-powercut")
	want, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Close(); err != nil { // the cut needs every file of the mount closed
		t.Fatal(err)
	}
	if err := pc.Cut(); err != nil {
		t.Fatal(err)
	}
	tg = open(t, path)
	got, ok, err := tg.Find(context.Background(), d)
	switch {
	case err != nil:
		t.Fatal(err)
	case !ok:
		t.Fatalf("after the cut the file has no line for %s", d.Key)
	case got != want:
		t.Fatalf("after the cut Find = %+v, want %+v", got, want)
	}
}
