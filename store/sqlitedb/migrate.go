package sqlitedb

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// The migrations runner. Each owner package declares its own steps,
// numbered in one sequence shared by all owners; PRAGMA user_version
// records how many versions ran. A version may have steps of more than one
// owner (the first ones do: they were written before the tables had
// separate owners); they run in the order the owners are given, in one
// transaction with the rest of the upgrade.

// Step is one owner's part of a numbered migration. Append only: never
// edit a step that has shipped, never renumber one.
type Step struct {
	Version int    // 1, 2, …: the user_version the file has once it ran
	SQL     string // one or more statements
}

// Sequence is every version's steps, in order.
type Sequence [][]Step

// Merge orders the steps of owners by version; steps of one version keep
// the order of owners. Versions must run from 1 without a gap.
func Merge(owners ...[]Step) (Sequence, error) {
	var all []Step
	for _, steps := range owners {
		all = append(all, steps...)
	}
	// Stable: the owners' order decides within a version.
	slices.SortStableFunc(all, func(a, b Step) int { return cmp.Compare(a.Version, b.Version) })
	var seq Sequence
	for _, s := range all {
		switch {
		case s.Version == len(seq):
			seq[len(seq)-1] = append(seq[len(seq)-1], s)
		case s.Version == len(seq)+1:
			seq = append(seq, []Step{s})
		default:
			return nil, fmt.Errorf("sqlitedb: migrate: step for version %d follows version %d", s.Version, len(seq))
		}
	}
	return seq, nil
}

// MustMerge is Merge for sequences fixed at compile time.
func MustMerge(owners ...[]Step) Sequence {
	seq, err := Merge(owners...)
	if err != nil {
		panic(err)
	}
	return seq
}

// Len is the version a file has once every step ran.
func (s Sequence) Len() int { return len(s) }

// SQL is version v's steps as one script (v from 1), for a test that
// builds a file as an older binary left it.
func (s Sequence) SQL(v int) string {
	var out string
	for i, st := range s[v-1] {
		if i > 0 {
			out += "\n"
		}
		out += st.SQL
	}
	return out
}

// Up runs, in tx, the steps of every version after the file's, and records
// the new version. A file newer than the sequence is refused.
func (s Sequence) Up(ctx context.Context, tx *sql.Tx) error {
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if version > len(s) {
		return fmt.Errorf("database schema version %d is newer than this binary knows (%d)", version, len(s))
	}
	for v := version + 1; v <= len(s); v++ {
		for _, st := range s[v-1] {
			if _, err := tx.ExecContext(ctx, st.SQL); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
		}
	}
	if version == len(s) {
		return nil
	}
	_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(s)))
	return err
}
