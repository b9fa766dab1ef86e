// Package store is the ticketrelay database file and who lives in it. The
// file, its writer and its migrations runner are package sqlitedb's; each
// tenant owns its tables and migration steps (ledger, outbox, trail). This
// package only puts the tenants' steps together, so that no tenant imports
// another to open the file.
package store

import (
	"context"

	"ticketrelay/store/ledger"
	"ticketrelay/store/outbox"
	"ticketrelay/store/sqlitedb"
	"ticketrelay/store/trail"
)

// Schema is the database's one migration sequence, numbered as the file's
// user_version has always counted it. At a version with steps of several
// owners, the ledger's run first, then the outbox's, then the trail's.
var Schema = sqlitedb.MustMerge(ledger.Migrations, outbox.Migrations, trail.Migrations)

// Open opens (creating if needed) the database at path and migrates it to
// Schema.
func Open(ctx context.Context, path string) (*sqlitedb.DB, error) {
	return sqlitedb.Open(ctx, path, Schema)
}
