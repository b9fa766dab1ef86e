package github

// The token's access: GitHub keeps the labels of a new issue only for a
// token with push access (or a GitHub App installation token with issues
// write), and drops them silently otherwise; without its key label an
// issue cannot be found again. It is checked before the first create.

import (
	"context"
	"encoding/json"
	"fmt"

	"ticketrelay/delivery/downstream"
)

// ensureLabels makes sure the token's issues keep their labels: checked
// once (one check at a time) before the first create; a check that failed
// for a passing reason is made again by the next delivery.
func (t *Target) ensureLabels(ctx context.Context) error {
	if done, err := t.state(); done || err != nil {
		return err
	}
	select {
	case t.check <- struct{}{}:
	case <-ctx.Done():
		return &downstream.Error{Class: downstream.Transient, Err: fmt.Errorf("waiting for the check of the token's access: %w", ctx.Err())}
	}
	defer func() { <-t.check }()
	if done, err := t.state(); done || err != nil {
		return err
	}
	verified, err := t.checkLabels(ctx)
	if err != nil {
		return err
	}
	if verified {
		t.mu.Lock()
		t.verified = true
		t.mu.Unlock()
	}
	return nil
}

// state reports whether creates may go ahead without a check, or why no
// create may go ahead at all.
func (t *Target) state() (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped != nil {
		return true, t.dropped
	}
	return t.verified, nil
}

// checkLabels asks GitHub whether the token may set labels on a new issue.
// It reports true when it may; false without an error when the answer
// proves nothing either way (a rejected token, an unknown repository: the
// create will be refused with the API's own message); a transient error
// when the check should be made again; a permanent error when the token
// lacks the access.
func (t *Target) checkLabels(ctx context.Context) (bool, error) {
	var repo struct {
		Permissions *struct {
			Push, Triage bool
		} `json:"permissions"`
	}
	if err := t.get(ctx, t.repo, &repo); err != nil {
		return false, checkFailed(err)
	}
	if repo.Permissions != nil && repo.Permissions.Push {
		return true, nil
	}
	// A GitHub App installation token: the repository's permissions say
	// nothing of it (missing, or push false). Only an installation may list
	// its repositories.
	var inst json.RawMessage
	err := t.get(ctx, t.api.Base+"/installation/repositories?per_page=1", &inst)
	if err == nil {
		return true, nil
	}
	if e := downstream.Classify(err); e.Class == downstream.Transient {
		return false, checkFailed(err)
	}
	has := "no push access to it"
	switch {
	case repo.Permissions == nil:
		has = "GitHub reports no permissions for it"
	case repo.Permissions.Triage:
		has = "only triage access to it (GitHub keeps the labels of a new issue only for push access)"
	}
	return false, &downstream.Error{Class: downstream.Permanent, Err: fmt.Errorf(
		"github %q: the token cannot set labels on %s/%s: it has %s; GitHub drops the labels of a new issue silently without "+
			"push access, and an issue without its key label cannot be found again after a lost answer, so nothing was created: "+
			"give the token's user write (push) access to the repository, or use a GitHub App installation token with issues write",
		t.cfg.Name, t.cfg.Owner, t.cfg.Repo, has)}
}

// checkFailed translates a failed check: a transient failure is returned
// (rest says a GET never acted); any other proves nothing.
func checkFailed(err error) error {
	e := downstream.Classify(err)
	if e.Class != downstream.Transient {
		return nil
	}
	e.Err = fmt.Errorf("checking the token's access to the repository: %w", e.Err)
	return e
}
