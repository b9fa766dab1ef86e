package request

import "time"

// CopiedRecord is one write of a multi-host installation's cluster record
// as a host's copy of it folds it (the console's whole-installation view):
// the cluster record reads it from the bucket's stream, the ledger keeps
// it in its read tables.
type CopiedRecord struct {
	Key       string // the bucket key
	RequestID string // scoped
	Subject   string
	TicketID  string
	Target    string
	Title     string
	// Fingerprint is the report's (create_ticket's fingerprint); "" if none.
	Fingerprint string
	Host        string // the host holding it
	Phase       string
	AcceptedAt  time.Time
	Delivery    *Delivery // nil: none yet; Version is the record's
	By          string    // the host whose forwarder wrote Delivery
	Rev         uint64    // the bucket's stream sequence of this write
	Deleted     bool      // the key was deleted or purged
}

// The copy's cursors: the last stream sequence folded of each stream.
const (
	CopyRecords = "records"
	CopyTrail   = "trail"
)
