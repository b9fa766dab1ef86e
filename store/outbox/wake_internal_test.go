package outbox

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ticketrelay/testkit/testwait"
)

// socketPath is a wake-up socket path in a fresh directory, short enough
// for sun_path wherever the test's temporary directory is.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "tickets.db-wake")
}

func listen(t *testing.T, path string, received func()) *wakeups {
	t.Helper()
	if received == nil {
		received = func() {}
	}
	w, err := listenWakeups(path, received)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}

// wokenBy calls wake until w holds a token, for at most 5 s.
func wokenBy(t *testing.T, w *wakeups, wake func()) {
	t.Helper()
	testwait.For(t, 5*time.Second, "a wake-up at the listener", func() bool {
		wake()
		return took(w)
	})
}

// wakeRepeatedly calls w.Wake n times and fails t if that takes 10 s: a
// Wake that waits (for a relay, for room) would stall a commit.
func wakeRepeatedly(t *testing.T, w *Waker, n int, where string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			w.Wake()
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d wake-ups %s did not return within 10s", n, where)
	}
}

// took takes w's token, if it holds one.
func took(w *wakeups) bool {
	select {
	case <-w.c:
		return true
	default:
		return false
	}
}

func TestWakeupsReachTheListener(t *testing.T) {
	path := socketPath(t)
	var received atomic.Int64
	l := listen(t, path, func() { received.Add(1) })
	w := NewWaker(path)
	defer w.Close()
	w.Wake()
	select {
	case <-l.c:
	case <-time.After(5 * time.Second):
		t.Fatal("the first wake-up did not arrive")
	}
	// Many wake-ups before a take make one token: one round reads them all.
	// (The socket's queue is short, 10 datagrams by default on Linux: what
	// does not fit is not needed.)
	for range 50 {
		w.Wake()
	}
	testwait.For(t, 5*time.Second, "more datagrams", func() bool { return received.Load() > 1 })
	testwait.For(t, 5*time.Second, "the token of the burst", func() bool { return took(l) })
}

func TestWakeWithoutAListenerNeitherBlocksNorFails(t *testing.T) {
	path := socketPath(t)
	w := NewWaker(path)
	defer w.Close()
	wakeRepeatedly(t, w, 1000, "with no relay listening")
	// A relay that starts listening hears the next commit.
	l := listen(t, path, nil)
	w.Wake()
	testwait.For(t, 5*time.Second, "the first wake-up after the relay bound", func() bool { return took(l) })
}

func TestWakerFollowsARelayThatTookOverThePath(t *testing.T) {
	path := socketPath(t)
	first := listen(t, path, nil)
	w := NewWaker(path)
	defer w.Close()
	wokenBy(t, first, w.Wake)
	// Another relay takes the lease: it replaces the socket at the path.
	second := listen(t, path, nil)
	wokenBy(t, second, w.Wake)
	// The first, closing late, leaves the second's socket alone.
	first.close()
	fi, err := os.Lstat(path)
	if err != nil || !os.SameFile(fi, second.fi) {
		t.Fatalf("the socket at the path after the first relay closed: %v, %v; want the second's", fi, err)
	}
	wokenBy(t, second, w.Wake)
}

func TestWakeNeverWaitsForAFullQueue(t *testing.T) {
	path := socketPath(t)
	// A socket that never reads: its queue fills.
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := NewWaker(path)
	defer w.Close()
	wakeRepeatedly(t, w, 5000, "into a full queue")
	// What did fit is there to read.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := conn.ReadFromUnix(make([]byte, 4)); err != nil {
		t.Fatalf("reading the full queue: %v", err)
	}
}

func TestListenWakeupsLeavesWhatIsNotASocket(t *testing.T) {
	path := socketPath(t)
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenWakeups(path, func() {}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listenWakeups over a regular file = %v, want a refusal", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "not a socket" {
		t.Fatalf("the file in the way was changed: %q, %v", b, err)
	}
	long := filepath.Join(filepath.Dir(path), strings.Repeat("d", 120), "tickets.db-wake")
	if _, err := listenWakeups(long, func() {}); !errors.Is(err, ErrWakeupPathTooLong) {
		t.Fatalf("listenWakeups(%d bytes) = %v, want ErrWakeupPathTooLong", len(long), err)
	}
	// A socket a killed relay left is replaced.
	stale, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path + "2", Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	stale.Close() // the file stays, as after SIGKILL
	l := listen(t, path+"2", nil)
	wokenBy(t, l, NewWaker(path+"2").Wake)
	l.close()
	if _, err := os.Lstat(path + "2"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket after close: %v, want it removed", err)
	}
}
