package clusterrec

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/request"
)

// consolePrefix starts the key where a host says where its operator
// console answers, so that another host's console can send an operator
// there for an action on a request only that host's ledger holds.
const consolePrefix = "c."

// PublishConsole records url as this host's console address; "" removes
// it (the host serves no console).
func (s *Store) PublishConsole(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	key := consolePrefix + s.Host()
	var err error
	if url == "" {
		err = s.kv.Delete(ctx, key)
	} else {
		_, err = s.kv.PutString(ctx, key, url)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: console address of %s: %w", ErrUnavailable, s.Host(), err)
	}
	return nil
}

// ConsoleOf is the console address host published; "" if none.
func (s *Store) ConsoleOf(ctx context.Context, host string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	e, err := s.kv.Get(ctx, consolePrefix+host)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w: console address of %s: %w", ErrUnavailable, host, err)
	}
	return string(e.Value()), nil
}

// Report is where the request whose scoped id is scoped stands by its
// record, read from the bucket's leader (the operator console's view of a
// request another host may hold), with the record; found false if the
// record has none.
func (s *Store) Report(ctx context.Context, scoped string) (request.Report, Record, bool, error) {
	rec, _, found, err := s.Get(ctx, scoped)
	if err != nil || !found {
		return request.Report{RequestID: scoped, Status: request.StatusUnknown, Scoped: scoped}, rec, false, err
	}
	t := rec.Ticket
	if rec.Delivery == nil && rec.Phase == PhaseClaimed {
		st := request.InterruptedStatus(t.RequestID)
		st.Scoped, st.Target, st.TicketID = scoped, t.Target, t.ID
		return st, rec, true, nil
	}
	return request.StatusOf(t, t.CreatedAt, nil, rec.Delivery.Ledger(scoped)), rec, true, nil
}
