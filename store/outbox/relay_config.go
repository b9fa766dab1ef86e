package outbox

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"ticketrelay/internal/backoff"
)

// RelayConfig tunes the relay. Zero fields take the documented defaults.
type RelayConfig struct {
	// Holder identifies this relay in the lease table. Required.
	Holder string
	// Subject is the subject the broker sees for a row's (the publisher
	// puts an installation's name in it), for the publish spans; nil: the
	// row's own. Optional.
	Subject func(rowSubject string) string
	// Predecessor is a holder known to be dead (see Lease.Dead): a lease it
	// still holds is taken at once. Optional.
	Predecessor string
	// BatchSize is the most rows read and published per round. Default 512.
	BatchSize int
	// Pipeline is how many batches may be in flight at once: while one
	// waits for its acknowledgements and its mark, the next is read and
	// published. Default 8: 4,096 messages with the default batch, the
	// publisher's async window; fewer left the relay further behind raw
	// publish (decision 0073 has the measurements).
	Pipeline int
	// WakeupPath is the socket (WakeupPath of the database) the relay
	// listens on for word of committed rows while it holds the lease: a
	// wake-up starts a round at once, and it does not poll at
	// BusyPollInterval. Empty, or a socket that cannot be bound: it polls.
	// Optional.
	WakeupPath string
	// PollInterval is the wait after a round that found nothing, and with
	// wake-ups the longest wait after any round that did not fill a batch.
	// Default 20ms.
	PollInterval time.Duration
	// BusyPollInterval is, without wake-ups, the wait after a round that
	// published a partial batch, or found none less than BusyFor after one
	// that published: rows are arriving, so the next are likely there soon.
	// Default 2ms: the idle interval would otherwise go into every
	// ticket's lag (decision 0074 has the measurements).
	BusyPollInterval time.Duration
	// BusyFor is how long after the last row it published a relay without
	// wake-ups keeps polling at BusyPollInterval. At 100 tickets/s most
	// rounds find nothing, and the idle interval alone would add half of it
	// to the lag. Default 1s.
	BusyFor time.Duration
	// LeaseTTL is how long the lease lasts without renewal; it is renewed
	// every third of it. A crashed relay's successor waits at most this long.
	// Default 15s.
	LeaseTTL time.Duration
	// GaugeInterval is how often the backlog gauges are refreshed. Default 1s.
	GaugeInterval time.Duration
	// RescanEvery bounds how long rows keep flowing before a round that
	// found less than a full batch waits for every batch in flight and
	// reads from the start again (rows whose publish failed are picked up
	// at once anyway; an operator's redrive waits for this). A backlog
	// of full batches is read through first. Default 1s.
	RescanEvery time.Duration
	// ErrorBackoff paces rounds after a failure. Default 50ms up to 5s.
	ErrorBackoff backoff.Policy
}

// WithDefaults returns c with every zero field set to its default.
func (c RelayConfig) WithDefaults() RelayConfig {
	c.BatchSize = cmp.Or(c.BatchSize, 512)
	c.Pipeline = cmp.Or(c.Pipeline, 8)
	c.PollInterval = cmp.Or(c.PollInterval, 20*time.Millisecond)
	c.BusyPollInterval = cmp.Or(c.BusyPollInterval, min(2*time.Millisecond, c.PollInterval))
	c.BusyFor = cmp.Or(c.BusyFor, time.Second)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 15*time.Second)
	c.GaugeInterval = cmp.Or(c.GaugeInterval, time.Second)
	c.RescanEvery = cmp.Or(c.RescanEvery, time.Second)
	if c.ErrorBackoff == (backoff.Policy{}) {
		c.ErrorBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}
	}
	return c
}

func (c RelayConfig) validate() error {
	if c.Holder == "" {
		return errors.New("outbox: relay needs a Holder")
	}
	if c.BatchSize < 1 || c.Pipeline < 1 || c.PollInterval <= 0 || c.RescanEvery <= 0 || c.LeaseTTL < time.Second {
		return fmt.Errorf("outbox: invalid relay config %+v", c)
	}
	return nil
}
