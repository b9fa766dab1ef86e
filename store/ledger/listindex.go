package ledger

import "ticketrelay/store/sqlitedb"

// ListIndexVersion is the ledger's migration for the indexes the console's
// lists read by whatever they filter (see docs/decisions/0156): the one
// place its number is written.
const ListIndexVersion = 24

// listIndexMigrations let every list of the console read an index range
// newest first, however rare its matches (decision 0156):
//
//   - undelivered holds the requests without a delivery record (the
//     waiting list), kept by triggers in the transaction of every write
//     to requests and deliveries, whoever writes it (accept, the
//     forwarder's records, the cluster record's mirror, redrive, resolve,
//     retention);
//   - requests by subject, by target, and by fingerprint (partial: only
//     fingerprinted requests pay for it), each ending with the id, so a
//     range is in list order;
//   - requests_late holds the requests accepted out of order: whose
//     acceptance time is earlier than one already in the ledger (a
//     request committed with another host's claim time, an adopted one, a
//     clock stepped back). Every other request's time grows with its id,
//     so a time range is an id range plus the late requests in it;
//   - the same for the cluster record's copy: by subject, its late
//     records, and a full-text index of its titles.
var listIndexMigrations = []sqlitedb.Step{{Version: ListIndexVersion, SQL: `CREATE TABLE undelivered (
		id     INTEGER PRIMARY KEY, -- the ledger row (requests.id)
		target TEXT NOT NULL        -- the request's target
	);
	CREATE INDEX undelivered_target ON undelivered(target, id);
	INSERT INTO undelivered (id, target) SELECT r.id, r.target FROM requests r
		WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = r.id);
	CREATE INDEX requests_subject ON requests(subject, id);
	CREATE INDEX requests_target ON requests(target, id);
	CREATE INDEX requests_fingerprint ON requests(fingerprint, id) WHERE fingerprint != '';
	CREATE TABLE requests_late (
		id         INTEGER PRIMARY KEY, -- the ledger row (requests.id)
		created_at INTEGER NOT NULL
	);
	INSERT INTO requests_late (id, created_at) SELECT id, created_at FROM (SELECT id, created_at,
			max(created_at) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newest FROM requests)
		WHERE created_at < newest;

	CREATE TRIGGER list_index_request_in AFTER INSERT ON requests
	BEGIN
		INSERT INTO undelivered (id, target) SELECT NEW.id, NEW.target
			WHERE NOT EXISTS (SELECT 1 FROM deliveries WHERE id = NEW.id);
		INSERT INTO requests_late (id, created_at) SELECT NEW.id, NEW.created_at
			WHERE NEW.created_at < (SELECT max(created_at) FROM requests);
	END;
	CREATE TRIGGER list_index_request_out AFTER DELETE ON requests
	BEGIN
		DELETE FROM undelivered WHERE id = OLD.id;
		DELETE FROM requests_late WHERE id = OLD.id;
	END;
	CREATE TRIGGER list_index_request_target AFTER UPDATE OF target ON requests
	BEGIN
		UPDATE undelivered SET target = NEW.target WHERE id = NEW.id;
	END;
	CREATE TRIGGER list_index_delivery_in AFTER INSERT ON deliveries
	BEGIN
		DELETE FROM undelivered WHERE id = NEW.id;
	END;
	CREATE TRIGGER list_index_delivery_out AFTER DELETE ON deliveries
	BEGIN
		INSERT OR IGNORE INTO undelivered (id, target) SELECT id, target FROM requests WHERE id = OLD.id;
	END;

	CREATE INDEX cluster_requests_subject ON cluster_requests(subject, id);
	CREATE TABLE cluster_late (
		id         INTEGER PRIMARY KEY, -- cluster_requests.id
		created_at INTEGER NOT NULL
	);
	INSERT INTO cluster_late (id, created_at) SELECT id, created_at FROM (SELECT id, created_at,
			max(created_at) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newest FROM cluster_requests)
		WHERE created_at < newest;
	CREATE INDEX cluster_requests_created ON cluster_requests(created_at);
	CREATE VIRTUAL TABLE cluster_fts USING fts5(title,
		content='cluster_requests', content_rowid='id', tokenize='unicode61 remove_diacritics 2', detail=none);
	INSERT INTO cluster_fts (rowid, title) SELECT id, title FROM cluster_requests;
	CREATE TRIGGER list_index_cluster_in AFTER INSERT ON cluster_requests
	BEGIN
		INSERT INTO cluster_late (id, created_at) SELECT NEW.id, NEW.created_at
			WHERE NEW.created_at < (SELECT max(created_at) FROM cluster_requests);
		INSERT INTO cluster_fts (rowid, title) VALUES (NEW.id, NEW.title);
	END;
	CREATE TRIGGER list_index_cluster_out AFTER DELETE ON cluster_requests
	BEGIN
		DELETE FROM cluster_late WHERE id = OLD.id;
		INSERT INTO cluster_fts (cluster_fts, rowid, title) VALUES ('delete', OLD.id, OLD.title);
	END;`},
	// The copy keeps each record's fingerprint, so that the installation's
	// list filters by it as a host's own does; records folded before this
	// step have none until their next write.
	{Version: ClusterFingerprintVersion, SQL: `ALTER TABLE cluster_requests ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
	CREATE INDEX cluster_requests_fingerprint ON cluster_requests(fingerprint, id) WHERE fingerprint != '';`}}

// ClusterFingerprintVersion is the migration that keeps fingerprints in
// the cluster record's copy: the one place its number is written.
const ClusterFingerprintVersion = 25
