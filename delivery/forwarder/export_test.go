package forwarder

import "time"

// WorkersForTest is the number of concurrent deliveries f runs for target.
func (f *Forwarder) WorkersForTest(target string) int { return f.workers(f.targets[target]) }

// MaxAckPendingForTest is every consumer's MaxAckPending.
const MaxAckPendingForTest = maxAckPending

// PacedForTest tells fn, for each call to a target with a rate limit, the
// time its turn under the limit comes (the call leaves then, or later if
// the process is slow to wake). Set it before Run.
func (f *Forwarder) PacedForTest(fn func(requestID string, turn time.Time)) { f.paced = fn }
