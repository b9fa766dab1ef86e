package front

import (
	"ticketrelay/front/mcptools"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
)

// The stores are peers behind the interfaces their users declare; the
// wiring, which joins them, checks that each fits (decision 0140).
var (
	_ mcptools.Requests = (*ledger.Ledger)(nil)
	_ mcptools.Requests = (*clusterrec.Front)(nil)
	_ clusterrec.Local  = (*ledger.Ledger)(nil)
)
