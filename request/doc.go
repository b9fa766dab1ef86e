// Package request holds the words every part of ticketrelay uses for a
// request on its way: where it stands (Status, Report), why a delivery
// failed (Failure), the delivery record (Delivery, Prior), a create's
// answer (Result), what the running dispatchers serve (Served), and the
// errors callers match (ConflictError, ErrOtherSubject, ErrStale,
// ErrNotFound, ErrState).
//
// Both stores (ledger, one host's SQLite file; clusterrec, the cluster
// record of a multi-host installation) report in these words, and the
// tools, the forwarder and the audit speak them without importing either
// store (decision 0140). Turning a Report into what the agent is told is
// the front's (mcptools).
package request
