package dispatcher

import (
	"ticketrelay/delivery/audit"
	"ticketrelay/delivery/forwarder"
	"ticketrelay/internal/maintenance"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
)

// The stores are peers behind the interfaces their users declare; the
// wiring, which joins them, checks that each fits (decision 0140).
var (
	_ forwarder.Deliveries      = (*ledger.Ledger)(nil)
	_ forwarder.BatchDeliveries = (*ledger.Ledger)(nil)
	_ forwarder.Deliveries      = (*clusterrec.Deliveries)(nil)
	_ forwarder.Parker          = (*ledger.Ledger)(nil)
	_ forwarder.Parker          = (*clusterrec.Deliveries)(nil)
	_ audit.Store               = (*ledger.Ledger)(nil)
	_ audit.Store               = (*clusterrec.AuditStore)(nil)
	_ audit.Blocker             = (*ledger.Presence)(nil)
	_ maintenance.PruneStore    = (*ledger.Ledger)(nil)
	_ maintenance.Entry         = (*ledger.Presence)(nil)
	_ clusterrec.Committer      = (*ledger.Ledger)(nil)
	_ clusterrec.AuditLedger    = (*ledger.Ledger)(nil)
)
