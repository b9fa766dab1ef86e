package local

// Comments and updates are lines of their own in the file, keyed as
// tickets are: a key already in the file is never written again, and the
// index finds it. Consistent by construction: the index is updated with
// the write, under one lock.

import (
	"context"
	"strconv"
	"strings"

	"ticketrelay/delivery/downstream"
)

var (
	_ downstream.Commenter     = (*Target)(nil)
	_ downstream.CommentFinder = (*Target)(nil)
	_ downstream.Updater       = (*Target)(nil)
)

// CommentCapabilities implements downstream.Commenter: keyed, with a
// consistent lookup, as tickets.
func (t *Target) CommentCapabilities() downstream.Capabilities { return Capabilities }

// ParseTicket implements downstream.TicketParser: a ticket's receipt id
// (line-N) or URL (file URL#LN) in this file.
func (t *Target) ParseTicket(ref string) (downstream.Receipt, error) {
	s := strings.TrimSpace(ref)
	n := -1
	if rest, ok := strings.CutPrefix(s, "line-"); ok {
		n = atoi(rest)
	} else if rest, ok := strings.CutPrefix(s, t.url+"#L"); ok {
		n = atoi(rest)
	}
	t.mu.Lock()
	ok := n > 0 && t.tkts.has(n)
	t.mu.Unlock()
	if !ok {
		return downstream.Receipt{}, downstream.BadTicket("local", t.name, ref, "the receipt of a ticket in "+t.path+" (line-N, or "+t.url+"#LN)")
	}
	return t.receipt(n), nil
}

// atoi reads a positive decimal without sign or leading zero; -1 if not.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || strconv.Itoa(n) != s {
		return -1
	}
	return n
}

// AddComment implements downstream.Commenter.
func (t *Target) AddComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, error) {
	tk, err := downstream.PrepareComment(t, d)
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	line, err := t.write(Line{Key: d.Key, Comment: &CommentLine{Ticket: tk.ExternalID, Body: d.Body}})
	if err != nil {
		return downstream.CommentReceipt{}, err
	}
	return downstream.CommentReceipt(t.receipt(line)), nil
}

// FindComment implements downstream.CommentFinder.
func (t *Target) FindComment(ctx context.Context, d downstream.CommentDelivery) (downstream.CommentReceipt, bool, error) {
	r, ok, err := t.Find(ctx, downstream.Delivery{Key: d.Key})
	return downstream.CommentReceipt(r), ok, err
}

// UpdateFields implements downstream.Updater: every field (the file
// records what was set).
func (t *Target) UpdateFields() []downstream.Field { return downstream.Fields }

// Update implements downstream.Updater.
func (t *Target) Update(ctx context.Context, d downstream.UpdateDelivery) (downstream.Receipt, error) {
	tk, u, err := downstream.PrepareUpdate(t, t.name, d)
	if err != nil {
		return downstream.Receipt{}, err
	}
	if _, err := t.write(Line{Key: d.Key, Update: &UpdateLine{Ticket: tk.ExternalID, Set: u}}); err != nil {
		return downstream.Receipt{}, err
	}
	return tk, nil
}

// bitset is a set of line numbers.
type bitset []uint64

func (b *bitset) set(n int) {
	for len(*b) <= n/64 {
		*b = append(*b, 0)
	}
	(*b)[n/64] |= 1 << (n % 64)
}

func (b bitset) has(n int) bool { return n/64 < len(b) && b[n/64]&(1<<(n%64)) != 0 }
