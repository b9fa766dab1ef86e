package forwarder

// WorkersForTest is the number of concurrent deliveries f runs for target.
func (f *Forwarder) WorkersForTest(target string) int { return f.workers(f.targets[target]) }

// MaxAckPendingForTest is every consumer's MaxAckPending.
const MaxAckPendingForTest = maxAckPending
