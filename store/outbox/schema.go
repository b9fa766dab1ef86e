package outbox

import "ticketrelay/store/sqlitedb"

// Migrations are the outbox's steps of the database's one migration
// sequence (sqlitedb.Merge: ledger.Open runs them all on the file). Its
// tables are outbox and leases. Append only.
var Migrations = []sqlitedb.Step{
	{Version: 1, SQL: schemaV1},
	{Version: 2, SQL: schemaV2},
	{Version: 3, SQL: schemaV3},
	{Version: 4, SQL: schemaV4},
	{Version: 14, SQL: schemaV14},
}

// schemaV1 is the outbox part of the first migration (run by the ledger).
const schemaV1 = `
CREATE TABLE outbox (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	request_id   TEXT NOT NULL UNIQUE,
	subject      TEXT NOT NULL,
	payload      BLOB NOT NULL,
	created_at   INTEGER NOT NULL, -- unix nanoseconds, the ledger commit
	published_at INTEGER           -- unix nanoseconds of the JetStream ack
);
CREATE INDEX outbox_pending ON outbox(id) WHERE published_at IS NULL;
CREATE TABLE leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	expires_at INTEGER NOT NULL -- unix nanoseconds
) WITHOUT ROWID;`

// schemaV2 adds the redrive generation (part of the second migration).
const schemaV2 = `ALTER TABLE outbox ADD COLUMN generation INTEGER NOT NULL DEFAULT 0; -- bumped by each redrive`

// schemaV3 (part of the third migration) drops the unique index on
// request_id: an insert at a random key, a page of the WAL per create. A row
// is found by its id, which the ledger gives it: its own row's id.
const schemaV3 = `
CREATE TABLE outbox_v3 (
	id           INTEGER PRIMARY KEY, -- the ledger row's id
	request_id   TEXT NOT NULL,
	subject      TEXT NOT NULL,
	payload      BLOB NOT NULL,
	created_at   INTEGER NOT NULL, -- unix nanoseconds, the ledger commit
	published_at INTEGER,          -- unix nanoseconds of the JetStream ack
	generation   INTEGER NOT NULL DEFAULT 0 -- bumped by each redrive
);
INSERT INTO outbox_v3 (id, request_id, subject, payload, created_at, published_at, generation)
	SELECT id, request_id, subject, payload, created_at, published_at, generation FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v3 RENAME TO outbox;
CREATE INDEX outbox_pending ON outbox(id) WHERE published_at IS NULL;`

// schemaV4 (the fourth migration) records where the stream stored each
// message, so that the dispatcher's audit can ask the stream whether it
// still holds it.
const schemaV4 = `ALTER TABLE outbox ADD COLUMN stream_seq INTEGER; -- JetStream sequence of the stored message; NULL: not known`

// schemaV14 keeps the trace context of the call that accepted each request
// (W3C traceparent and tracestate; NULL when tracing was off), so that the
// relay, in the other process, publishes the message within that trace.
const schemaV14 = `ALTER TABLE outbox ADD COLUMN traceparent TEXT;
ALTER TABLE outbox ADD COLUMN tracestate TEXT;`
