// Package archetype is what every long-lived component of a process is
// handed together: its logger, its clock and its metrics (river's
// baseservice.Archetype). A constructor takes an Archetype, its Config and
// its collaborators, instead of three positional arguments that every
// constructor repeated in its own order.
package archetype

import (
	"log/slog"
	"time"

	"ticketrelay/metrics"
)

// Archetype is a component's logger, clock and metrics.
type Archetype struct {
	// Logger receives the component's lines. Default: one that discards them.
	Logger *slog.Logger
	// Now is the component's clock. Default: time.Now.
	Now func() time.Time
	// Metrics is the dispatcher's metrics set. The components that record
	// into it (the relay, the forwarder, the audit) need it; no default,
	// since a set nobody scrapes would hide a missing one. mcp-front's
	// components record into the front's set and leave it nil.
	Metrics *metrics.Dispatcher
}

// WithDefaults fills the zero fields that have a default.
func (a Archetype) WithDefaults() Archetype {
	if a.Logger == nil {
		a.Logger = slog.New(slog.DiscardHandler)
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	return a
}

// Component is a with its logger naming the component: every line it
// writes carries component=name.
func (a Archetype) Component(name string) Archetype {
	a = a.WithDefaults()
	a.Logger = a.Logger.With("component", name)
	return a
}
