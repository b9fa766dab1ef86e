package operate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"ticketrelay/request"
	"ticketrelay/store/ledger"
)

// Entry is one operator action as the audit trail records it.
type Entry struct {
	Subject   string    // who took it: the signed-in operator, or the command line's user
	Action    string    // ActionRedrive, ActionResolve, ActionForgetHost
	RequestID string    // the request's scoped id; empty for forget-host
	Target    string    // what else it names: the host forgotten, the external id recorded
	Outcome   string    // "ok", or the error that refused it
	Err       error     // that error; nil: done
	At        time.Time // when; the trail sets it if zero
}

// The actions' names in the trail.
const (
	ActionRedrive    = "redrive"
	ActionResolve    = "resolve"
	ActionForgetHost = "forget-host"
)

// Recorder records operator actions (the audit trail).
type Recorder interface {
	Record(ctx context.Context, e Entry) error
}

// Actor is who takes an action and where it is recorded; a nil Trail
// records nothing.
type Actor struct {
	Subject string
	Trail   Recorder
}

// CommandLine is the actor of a command run on the host: the operator it
// names (-operator), else the OS user ("os:NAME").
func CommandLine(operator string, trail Recorder) Actor {
	if operator == "" {
		operator = fmt.Sprintf("os:uid-%d", os.Getuid())
		if u, err := user.Current(); err == nil && u.Username != "" {
			operator = "os:" + u.Username
		}
	}
	return Actor{Subject: operator, Trail: trail}
}

// record writes e (the action's outcome err) to the trail. An action that
// was taken and not recorded is reported: the operator must know the
// trail misses it.
func (a Actor) record(ctx context.Context, e Entry, err error) error {
	if a.Trail == nil {
		return err
	}
	e.Subject, e.Outcome, e.Err = a.Subject, "ok", err
	if err != nil {
		e.Outcome = err.Error()
	}
	if rerr := a.Trail.Record(context.WithoutCancel(ctx), e); rerr != nil {
		if err != nil {
			return errors.Join(err, fmt.Errorf("audit trail: %w", rerr))
		}
		return fmt.Errorf("%s %s was done, but the audit trail did not record it: %w", e.Action, e.RequestID, rerr)
	}
	return err
}

// Store is the part of the ledger the actions read and change.
type Store interface {
	Summarize(ctx context.Context) (ledger.Summary, error)
	Redrive(ctx context.Context, requestID string) error
	RedriveFailed(ctx context.Context, target string) ([]string, error)
	Resolve(ctx context.Context, requestID string, delivered bool, externalID string) error
}

var _ Store = (*ledger.Ledger)(nil)

// Redrive puts the failed requests ids (scoped ids) back into delivery,
// with the same dedupe key. It goes on past a request it cannot redrive;
// it returns those it redrove and every refusal.
func Redrive(ctx context.Context, s Store, who Actor, ids []string) ([]string, error) {
	var done []string
	var errs []error
	for _, id := range ids {
		err := s.Redrive(ctx, id)
		if errors.Is(err, request.ErrNotFound) {
			err = fmt.Errorf("%w (never accepted, or forgotten after -retention)", err)
		}
		if err == nil {
			done = append(done, id)
		}
		if err := who.record(ctx, Entry{Action: ActionRedrive, RequestID: id}, err); err != nil {
			errs = append(errs, err)
		}
	}
	return done, errors.Join(errs...)
}

// RedriveFailed redrives every failed request, of target if it is not
// empty, and returns their ids. A target the ledger has no record of is an
// error: a mistyped name must not read as "nothing failed there".
func RedriveFailed(ctx context.Context, s Store, who Actor, target string) ([]string, error) {
	ids, err := s.RedriveFailed(ctx, target)
	if err != nil {
		return nil, who.record(ctx, Entry{Action: ActionRedrive, Target: target}, err)
	}
	if len(ids) == 0 && target != "" {
		if err := KnownTarget(ctx, s, target); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, id := range ids {
		if err := who.record(ctx, Entry{Action: ActionRedrive, RequestID: id}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return ids, errors.Join(errs...)
}

// KnownTarget fails unless the ledger holds a delivery record for target.
func KnownTarget(ctx context.Context, s Store, target string) error {
	sum, err := s.Summarize(ctx)
	if err != nil {
		return err
	}
	var known []string
	for _, t := range sum.Targets {
		if t.Target == target {
			return nil
		}
		known = append(known, t.Target)
	}
	have := "none"
	if len(known) > 0 {
		have = strings.Join(known, ", ")
	}
	return fmt.Errorf("redrive -failed -target %s: the ledger has no delivery record for target %q (targets it has records for: %s)", target, target, have)
}

// Resolution is how an operator settles an uncertain request once they
// checked its target.
type Resolution struct {
	// ExternalID: the ticket is there, under this id (settled delivered).
	// Empty: it is not there (settled failed).
	ExternalID string
	// Redrive, with no ExternalID: send it again now, under the same
	// dedupe key, instead of leaving the agent to file it anew.
	Redrive bool
}

// Resolve settles the uncertain request id as r says.
func Resolve(ctx context.Context, s Store, who Actor, id string, r Resolution) error {
	if r.ExternalID != "" && r.Redrive {
		return fmt.Errorf("resolve %s: a request found delivered is not sent again", id)
	}
	err := s.Resolve(ctx, id, r.ExternalID != "", r.ExternalID)
	if err := who.record(ctx, Entry{Action: ActionResolve, RequestID: id, Target: r.ExternalID}, err); err != nil || !r.Redrive {
		return err
	}
	_, err = Redrive(ctx, s, who, []string{id})
	return err
}

// HostForgetter drops a finished host from the cluster record
// (clusterrec.Store).
type HostForgetter interface {
	ForgetHost(ctx context.Context, host string) error
}

// ForgetHost drops host, removed for good, once the other hosts finished
// adopting it; the cluster record refuses a host live or not adopted yet.
func ForgetHost(ctx context.Context, f HostForgetter, who Actor, host string) error {
	if host == "" {
		return errors.New("forget-host: no host named")
	}
	return who.record(ctx, Entry{Action: ActionForgetHost, Target: host}, f.ForgetHost(ctx, host))
}
