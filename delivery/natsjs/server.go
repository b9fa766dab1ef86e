package natsjs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// The oldest nats-server ticketrelay runs on (decision 0105). 2.10 is the
// first to keep a stream's metadata, which holds the marks that tell an
// installation's stream from any other (MetaInstallation, MetaOwner): 2.9
// takes the stream, drops the marks, and the dispatcher's next start finds
// a stream that nothing says is its own. 2.10 is also the first to take
// sync_interval: always, without which an acknowledged ticket can be lost
// in a power cut. Atomic batches (2.12) are used where the server has them.
const (
	MinServerMajor = 2
	MinServerMinor = 10
)

// ErrServerTooOld: the NATS server lacks what ticketrelay relies on. It is
// final: waiting does not make the server newer.
var ErrServerTooOld = errors.New("natsjs: the NATS server is too old")

// CheckServer refuses the server nc is connected to if it is older than
// MinServerMajor.MinServerMinor. A version it cannot read passes: the
// check of the marks after the stream is written (EnsureStream) decides.
func CheckServer(nc *nats.Conn) error {
	v := nc.ConnectedServerVersion()
	if !ServerVersionTooOld(v) {
		return nil
	}
	return fmt.Errorf("%w: %s runs nats-server %s, and ticketrelay needs %d.%d or later: %s", ErrServerTooOld,
		nc.ConnectedUrlRedacted(), v, MinServerMajor, MinServerMinor, whyMinVersion)
}

// whyMinVersion ends the refusals of an old server: what it lacks and what
// the operator does.
var whyMinVersion = fmt.Sprintf("%d.%d keeps a stream's metadata, where the marks that tell this installation's stream "+
	"from any other are kept (older servers drop them, and the dispatcher could not start a second time), and takes "+
	"sync_interval: always, without which an acknowledged ticket can be lost in a power cut; upgrade the server "+
	"(it keeps its store and streams) and start the dispatcher again", MinServerMajor, MinServerMinor)

// ServerVersionTooOld reports whether version (as a server announces it:
// "2.9.10", "2.10.0-beta.3", "v2.11.1") is older than the minimum; false
// for a version it cannot read.
func ServerVersionTooOld(version string) bool {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major < MinServerMajor || major == MinServerMajor && minor < MinServerMinor
}
