//go:build unix

package outbox

import "syscall"

// sender is an unbound, non-blocking datagram socket that sends to one
// path. A send never waits: a net.Conn's Write would park the committing
// goroutine until the relay read.
type sender struct {
	fd int
	to *syscall.SockaddrUnix
}

func newSender(path string) (*sender, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &sender{fd: fd, to: &syscall.SockaddrUnix{Name: path}}, nil
}

func (s *sender) send() error { return syscall.Sendto(s.fd, []byte{1}, 0, s.to) }

func (s *sender) close() { syscall.Close(s.fd) }
