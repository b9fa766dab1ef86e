package outbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// Wake-ups. mcp-front commits outbox rows in its own process; without word
// from it the relay can only poll, and to keep the commit → publish lag
// short it polled every 2 ms while rows flowed: a query each time, most of
// them finding nothing, and still half a poll added to every ticket. So
// the process that commits rows sends a one-byte datagram to a Unix socket
// beside the database once a commit is durable, and the relay that holds
// the lease listens there and reads at once (decision 0096). A wake-up is
// a hint, never a message: one that is lost (no relay is listening, its
// queue is full, the platform has no Unix datagram sockets) costs only the
// relay's fallback poll, which still runs.

// WakeupPath is the wake-up socket of the database at dbPath: beside it,
// as SQLite's -wal and -shm files are, so that every process that opens the
// database by the same path finds the same socket.
func WakeupPath(dbPath string) string { return dbPath + "-wake" }

// maxSocketPath is the longest socket path that binds on every platform we
// build for (sun_path holds 104 bytes on the BSDs and macOS, 108 on Linux,
// with the terminating NUL).
const maxSocketPath = 103

// ErrWakeupPathTooLong is returned for a socket path that does not fit
// sun_path: the relay polls instead.
var ErrWakeupPathTooLong = errors.New("outbox: wake-up socket path too long for a Unix socket")

// Waker wakes the relay of one database. Wake never blocks and never
// fails: it is called after every commit, on the committing goroutine.
// Each wake-up is addressed to the path, not sent on a connection, so it
// reaches whichever relay is bound there now (one that took the lease over
// replaced the socket), and with none bound it costs a failed send.
type Waker struct {
	path string
	mu   sync.Mutex
	s    *sender // nil until the first Wake; see wake_unix.go
}

// NewWaker returns a Waker for the socket at path (WakeupPath).
func NewWaker(path string) *Waker { return &Waker{path: path} }

// Wake tells the relay, if one listens, that rows were committed.
func (w *Waker) Wake() {
	if len(w.path) > maxSocketPath {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.s == nil {
		s, err := newSender(w.path)
		if err != nil {
			return // no socket to send from: the relay polls
		}
		w.s = s
	}
	// ENOENT or ECONNREFUSED: no relay listens. EAGAIN: its queue is full,
	// so it has wake-ups waiting, which is enough.
	_ = w.s.send()
}

// Close releases the Waker's socket.
func (w *Waker) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.s != nil {
		w.s.close()
		w.s = nil
	}
}

// wakeups is the relay's end: a datagram socket bound at a path, and a
// channel that holds a token while wake-ups have come since the relay last
// took one. Any number of datagrams before a take make one token: the
// relay reads everything committed so far in one round.
type wakeups struct {
	path string
	conn *net.UnixConn
	fi   os.FileInfo // the socket file this bound, to remove only it
	c    chan struct{}
	done chan struct{}
}

// listenWakeups binds the socket at path. A socket file already there is
// a predecessor's (the relay binds only while it holds the lease): it is
// replaced. Anything else at the path is left alone and is an error.
func listenWakeups(path string, received func()) (*wakeups, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("%w: %s (%d bytes, at most %d)", ErrWakeupPathTooLong, path, len(path), maxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("outbox: wake-up socket %s: a file that is not a socket is in the way", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("outbox: wake-up socket: %w", err)
		}
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("outbox: wake-up socket: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("outbox: wake-up socket: %w", err)
	}
	w := &wakeups{path: path, conn: conn, fi: fi, c: make(chan struct{}, 1), done: make(chan struct{})}
	go w.receive(received)
	return w, nil
}

func (w *wakeups) receive(received func()) {
	defer close(w.done)
	buf := make([]byte, 16)
	for {
		_, _, err := w.conn.ReadFromUnix(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		received()
		select {
		case w.c <- struct{}{}:
		default:
		}
		if err != nil {
			// Not a closed socket, and no datagram: nothing more will come
			// from it. The relay polls as it would without one.
			return
		}
	}
}

// close stops listening and removes the socket file, unless another relay
// has bound its own there since (a lease this one lost).
func (w *wakeups) close() {
	w.conn.Close()
	<-w.done
	if fi, err := os.Lstat(w.path); err == nil && os.SameFile(fi, w.fi) {
		os.Remove(w.path)
	}
}
