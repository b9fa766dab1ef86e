// Package ledger owns the tables requests (the idempotency ledger:
// request_id → argument hash and result, and the ticket), deliveries (the
// delivery records, with the class of a failure), dispatchers and
// settings, with their migration steps and queries, on the database of
// package sqlitedb, and reports where a request stands as data
// (request.Report); the words said about it are its callers'.
package ledger

import (
	"slices"

	"ticketrelay/store/sqlitedb"
)

// Migrations are the ledger's steps of the database's one migration
// sequence (package store merges every owner's): its tables below, the
// requests' kind (actionsStep), the full-text index of the tickets
// (searchMigrations), the requests parked until their create settles
// (waitingMigrations), the open fingerprint groups (fingerprintStep) and
// the console's attempts (consoleMigrations).
var Migrations = slices.Concat(migrations, []sqlitedb.Step{actionsStep, fingerprintStep}, searchMigrations, waitingMigrations, consoleMigrations, []sqlitedb.Step{ticketIndexStep})

// migrations are the ledger's steps: the tables requests (with the tickets
// view), deliveries, dispatchers and settings. Append only: never edit a
// step that has shipped.
var migrations = []sqlitedb.Step{
	// 1: ledger, tickets, deliveries (the outbox adds outbox and leases).
	{Version: 1, SQL: `CREATE TABLE requests (
		request_id TEXT PRIMARY KEY,
		tool       TEXT NOT NULL,
		target     TEXT NOT NULL,
		args_hash  TEXT NOT NULL,
		ticket_id  TEXT NOT NULL,
		result     TEXT NOT NULL,
		created_at INTEGER NOT NULL -- unix nanoseconds
	) WITHOUT ROWID;
	CREATE INDEX requests_created ON requests(created_at);
	CREATE TABLE tickets (
		ticket_id  TEXT PRIMARY KEY,
		request_id TEXT NOT NULL UNIQUE REFERENCES requests(request_id) ON DELETE CASCADE,
		title      TEXT NOT NULL,
		body       TEXT NOT NULL,
		priority   TEXT NOT NULL,
		labels     TEXT NOT NULL, -- JSON array
		created_at INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE TABLE deliveries (
		request_id      TEXT PRIMARY KEY,
		target          TEXT NOT NULL,
		state           TEXT NOT NULL,
		attempts        INTEGER NOT NULL DEFAULT 0,
		next_attempt_at INTEGER,
		last_error      TEXT NOT NULL DEFAULT '',
		external_id     TEXT NOT NULL DEFAULT '',
		external_url    TEXT NOT NULL DEFAULT '',
		updated_at      INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX deliveries_state ON deliveries(state, target);`},
	// 2: operator redrive republishes under a new message id (the
	// outbox's step only).
	// 3: fewer B-trees keyed by random ids. A create inserted at a random
	// key into five (requests, tickets, tickets' request_id index and
	// foreign-key probe, the outbox's request_id index), each a page of the
	// WAL per commit and a cache miss on a large file. Now it inserts into one
	// small index (request_id → id); the rows are appended in id order. The
	// ticket lives in its ledger row (the view keeps it readable by name) and
	// the outbox row takes the ledger row's id. This step reads the outbox
	// table once, before the outbox's step of the same version rebuilds it:
	// the ledger rows take their ids from the outbox rows of their requests.
	{Version: 3, SQL: `CREATE TABLE requests_v3 (
		id         INTEGER PRIMARY KEY, -- also the outbox row's id; grows in commit order
		request_id TEXT NOT NULL UNIQUE,
		tool       TEXT NOT NULL,
		target     TEXT NOT NULL,
		args_hash  TEXT NOT NULL,
		ticket_id  TEXT NOT NULL,
		result     TEXT NOT NULL,
		created_at INTEGER NOT NULL, -- unix nanoseconds
		title      TEXT NOT NULL,
		body       TEXT NOT NULL,
		priority   TEXT NOT NULL,
		labels     TEXT NOT NULL -- JSON array
	);
	INSERT INTO requests_v3 (id, request_id, tool, target, args_hash, ticket_id, result, created_at, title, body, priority, labels)
		SELECT o.id, r.request_id, r.tool, r.target, r.args_hash, r.ticket_id, r.result, r.created_at, t.title, t.body, t.priority, t.labels
		FROM requests r JOIN outbox o USING (request_id) JOIN tickets t USING (request_id) ORDER BY o.id;
	DROP TABLE tickets;
	DROP TABLE requests;
	ALTER TABLE requests_v3 RENAME TO requests;
	CREATE INDEX requests_created ON requests(created_at);
	CREATE VIEW tickets AS
		SELECT ticket_id, request_id, title, body, priority, labels, created_at FROM requests;`},
	// 4: the stream sequence of each published message, for the audit that
	// finds messages the stream lost (the outbox's step only).
	// 5: delivery records keyed by the ledger row's id, as migration 3 did
	// for the tickets. Keyed by request_id, every record was an insert at a
	// random key into two B-trees (the table and its state index), two pages
	// of the WAL each: 40 of the 45 pages a dispatcher commit of 20 tickets
	// wrote. Ids grow in commit order, and tickets are delivered in about
	// that order, so records and index entries are now appended.
	{Version: 5, SQL: `CREATE TABLE deliveries_v5 (
		id              INTEGER PRIMARY KEY, -- the ledger row's id (requests.id)
		target          TEXT NOT NULL,
		state           TEXT NOT NULL,
		attempts        INTEGER NOT NULL DEFAULT 0,
		next_attempt_at INTEGER,
		last_error      TEXT NOT NULL DEFAULT '',
		external_id     TEXT NOT NULL DEFAULT '',
		external_url    TEXT NOT NULL DEFAULT '',
		updated_at      INTEGER NOT NULL
	);
	INSERT INTO deliveries_v5 (id, target, state, attempts, next_attempt_at, last_error, external_id, external_url, updated_at)
		SELECT r.id, d.target, d.state, d.attempts, d.next_attempt_at, d.last_error, d.external_id, d.external_url, d.updated_at
		FROM deliveries d JOIN requests r USING (request_id) ORDER BY r.id;
	DROP TABLE deliveries;
	ALTER TABLE deliveries_v5 RENAME TO deliveries;
	CREATE INDEX deliveries_state ON deliveries(state, target);`},
	// 6: a version per delivery record. Two copies of one message can be
	// handled at once (a redelivery after AckWait while the first copy is
	// still calling the downstream, or a copy on another dispatcher); each
	// write is conditional on the version its writer read, so only one
	// copy's attempt goes ahead. Existing records start at 1: 0 means none.
	{Version: 6, SQL: `ALTER TABLE deliveries ADD COLUMN version INTEGER NOT NULL DEFAULT 1;`},
	// 7: of a record's attempts, how many the downstream refused for its
	// rate limit; they do not count toward the attempt limit.
	{Version: 7, SQL: `ALTER TABLE deliveries ADD COLUMN throttled INTEGER NOT NULL DEFAULT 0;`},
	// 8: running dispatchers, their targets and key namespace (see Presence).
	{Version: 8, SQL: `CREATE TABLE dispatchers (
		holder        TEXT PRIMARY KEY,
		targets       TEXT NOT NULL, -- JSON array of target names
		key_namespace TEXT NOT NULL,
		seen_at       INTEGER NOT NULL
	);`},
	// 9: settings the dispatcher must keep across restarts (the dedupe
	// key namespace, see UseKeyNamespace).
	{Version: 9, SQL: `CREATE TABLE settings (
		name  TEXT PRIMARY KEY,
		value TEXT NOT NULL
	);`},
	// 10: the subject each request belongs to (ticket.Request.Subject).
	// request_id now holds the scoped id (ticket.ScopedID), which for the
	// anonymous subject is the request id itself: every row from before
	// is the anonymous subject's, under the name it always had, so it
	// replays, and is delivered under the same keys, as it did.
	{Version: 10, SQL: `ALTER TABLE requests ADD COLUMN subject TEXT NOT NULL DEFAULT '';`},
	// 11: the class of a failed delivery (Failure), which the forwarder
	// writes from the downstream error's class; find_request's advice
	// depends on it. Records from before have only the error's text: this
	// step derives their class from it, once, by the rules find_request
	// used on that text.
	{Version: 11, SQL: `ALTER TABLE deliveries ADD COLUMN failure TEXT NOT NULL DEFAULT '';
	UPDATE deliveries SET failure = CASE
		WHEN last_error GLOB 'permanent error (HTTP 4[0-9][0-9])*' THEN 'rejected'
		WHEN last_error GLOB 'auth error*' THEN 'auth'
		WHEN instr(last_error, 'attempts exhausted') > 0 THEN 'exhausted'
		WHEN last_error GLOB 'settled as not delivered*' THEN 'settled'
		ELSE 'permanent' END
	WHERE state = 'failed';`},
	// 12: who asked, beside the subject (ticket.Caller): the display name
	// and email the caller's token carried, recorded with the ticket so
	// that every delivery of it says the same. Rows from before have none
	// and are named by their subject.
	{Version: 12, SQL: `ALTER TABLE requests ADD COLUMN caller_name TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN caller_email TEXT NOT NULL DEFAULT '';`},
}
