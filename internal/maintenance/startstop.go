// Package maintenance holds the dispatcher's background services that keep
// the database in shape beside the delivery path: the Pruner (retention)
// and the Presence renewal. Each works on the slice of the store it
// declares, and all have one shape: a Loop run by Run(ctx), or started and
// stopped through StartStop.
package maintenance

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is returned by Start on a service that is running.
var ErrStarted = errors.New("maintenance: service already started")

// StartStop gives a service whose work is a blocking run(ctx) error the
// Start/Stop shape: Start runs it in a goroutine, Stop ends it and waits.
// Its zero value is ready; a service embeds one and passes its Run.
type StartStop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Start runs run until ctx ends or Stop is called. It fails if run is
// running already.
func (s *StartStop) Start(ctx context.Context, run func(context.Context) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.cancel, s.done, s.err = cancel, done, nil
	go func() {
		defer close(done)
		err := run(ctx)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}()
	return nil
}

// Stop ends the run Start began, waits for it and returns its error. It
// does nothing on a service not started, and may be called again.
func (s *StartStop) Stop() error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel = nil
	return s.err
}
