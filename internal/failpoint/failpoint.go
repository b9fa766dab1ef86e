// Package failpoint lets crash tests stop a process at an exact point, as
// `kill -9` would, without racing a signal against the code under test.
//
// Failpoints are armed only by the TICKETRELAY_FAILPOINTS environment
// variable, read once at start-up: a comma-separated list of NAME=ACTION,
// where ACTION is "kill" (SIGKILL this process on the first hit) or "kill@N"
// (on the Nth hit). Unset, Hit costs one atomic load.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// EnvVar names the variable that arms failpoints.
const EnvVar = "TICKETRELAY_FAILPOINTS"

// Points every failpoint name used in the code, so a typo in a test is an
// error instead of a silent no-op.
const (
	RelayAfterPublish     = "relay.after-publish"     // JetStream acked, outbox row not yet marked
	ForwarderAfterDeliver = "forwarder.after-deliver" // downstream called, outcome not yet recorded
	FrontAfterCommit      = "front.after-commit"      // ledger committed, answer not yet sent
	FrontAfterClaim       = "front.after-claim"       // cluster record claimed, ledger not yet committed
)

var known = map[string]bool{RelayAfterPublish: true, ForwarderAfterDeliver: true, FrontAfterCommit: true, FrontAfterClaim: true}

type point struct {
	killAt int64
	hits   atomic.Int64
}

var (
	armed  atomic.Bool
	once   sync.Once
	points map[string]*point
)

// Init parses the environment; it returns an error for a malformed or
// unknown failpoint. Call it once from main.
func Init() error {
	var err error
	once.Do(func() {
		points, err = parse(os.Getenv(EnvVar))
		armed.Store(len(points) > 0)
	})
	return err
}

func parse(spec string) (map[string]*point, error) {
	ps := map[string]*point{}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok || !known[name] {
			return nil, fmt.Errorf("failpoint: unknown failpoint %q in %s", item, EnvVar)
		}
		n := int64(1)
		if rest, ok := strings.CutPrefix(action, "kill@"); ok {
			v, err := strconv.ParseInt(rest, 10, 64)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("failpoint: bad count in %q", item)
			}
			n = v
		} else if action != "kill" {
			return nil, fmt.Errorf("failpoint: unknown action in %q (want kill or kill@N)", item)
		}
		ps[name] = &point{killAt: n}
	}
	return ps, nil
}

// Hit kills the process with SIGKILL if the failpoint name is armed and this
// is the hit it was armed for.
func Hit(name string) {
	if !armed.Load() {
		return
	}
	p := points[name]
	if p == nil {
		return
	}
	if p.hits.Add(1) == p.killAt {
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the signal cannot be caught
	}
}
