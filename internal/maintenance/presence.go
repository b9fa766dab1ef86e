package maintenance

import (
	"context"
	"log/slog"
	"time"

	"ticketrelay/internal/archetype"
	"ticketrelay/request"
)

// PresenceInterval is how often a running dispatcher renews its entry in
// the ledger; request.PresenceFresh allows for two renewals missed.
const PresenceInterval = request.PresenceFresh / 3

// Entry is a dispatcher's entry in the ledger (ledger.Presence): the
// writes the Presence service makes.
type Entry interface {
	Announce(ctx context.Context) error
	Withdraw(ctx context.Context) error
}

// Presence renews a running dispatcher's entry, so that mcp-front and the
// audit know it runs and what it serves, and withdraws it when stopped.
type Presence struct {
	entry Entry
	log   *slog.Logger
	every time.Duration
}

// NewPresence returns the service that keeps entry. The first Announce is
// the caller's (before the dispatcher says it is running).
func NewPresence(arch archetype.Archetype, entry Entry) *Presence {
	return &Presence{entry: entry, log: arch.WithDefaults().Logger, every: PresenceInterval}
}

// Run renews the entry every PresenceInterval until ctx ends, then
// withdraws it.
func (p *Presence) Run(ctx context.Context) error {
	return Loop{Interval: p.every, RunOnce: p.entry.Announce, Final: p.entry.Withdraw, Log: p.log,
		// The next renewal tries again; request.PresenceFresh allows for two.
		Failed: "could not renew the dispatcher's entry in the ledger"}.Run(ctx)
}
