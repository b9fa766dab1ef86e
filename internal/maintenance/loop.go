// Package maintenance holds the one shape of the dispatcher's periodic
// services (Loop) and those that keep the database in shape beside the
// delivery path: the Pruner (retention) and the Presence renewal. Each
// works on the slice of the store it declares.
//
// Every long-running service of a process, periodic or not, is run the
// same way (decision 0142): built by New…(arch, cfg, collaborators),
// started by Run(ctx) on a goroutine of the wiring's, stopped by the end
// of ctx, and done when Run returns: nil on a stop, an error only when it
// cannot go on.
package maintenance

import (
	"context"
	"log/slog"
	"time"
)

// finalTimeout bounds a Loop's Final, which runs after its context ended.
const finalTimeout = 5 * time.Second

// Loop is the one shape of a periodic service: RunOnce every Interval (and
// once at the start if Eager) until ctx ends, then Final. A round's error
// is logged, not returned: the next round tries again. Shutdown is not an
// error: a round cut short by the end of ctx logs nothing.
type Loop struct {
	Interval time.Duration
	Eager    bool // run once at the start rather than after the first Interval
	RunOnce  func(ctx context.Context) error
	// Final, if set, runs once ctx ended, with a context of its own that
	// lasts finalTimeout; its error is Run's.
	Final func(ctx context.Context) error
	Log   *slog.Logger
	// Failed is the warning logged with a round's error.
	Failed string
	// Poke, if set, starts a round at once when it receives: someone saw
	// that a round is due before the Interval ends.
	Poke <-chan struct{}
	// Due, if set, is asked before each wait for a channel that starts a
	// round at once when it is closed or receives; nil: none is due.
	Due func() <-chan struct{}
}

// Run runs the loop until ctx ends; it returns nil then, or Final's error.
func (l Loop) Run(ctx context.Context) error {
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	if l.Eager {
		l.round(ctx)
	}
	for {
		var due <-chan struct{}
		if l.Due != nil {
			due = l.Due()
		}
		select {
		case <-ctx.Done():
			return l.final(ctx)
		case <-t.C:
		case <-l.Poke:
		case <-due:
		}
		l.round(ctx)
	}
}

func (l Loop) round(ctx context.Context) {
	if err := l.RunOnce(ctx); err != nil && ctx.Err() == nil {
		l.Log.Warn(l.Failed, "err", err)
	}
}

func (l Loop) final(ctx context.Context) error {
	if l.Final == nil {
		return nil
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalTimeout)
	defer cancel()
	return l.Final(fctx)
}
