//go:build !unix

package outbox

import "errors"

// sender does not exist where there are no Unix datagram sockets: the
// relay polls.
type sender struct{}

func newSender(string) (*sender, error) { return nil, errors.ErrUnsupported }

func (*sender) send() error { return errors.ErrUnsupported }

func (*sender) close() {}
