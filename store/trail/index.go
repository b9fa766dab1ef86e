package trail

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"

	"modernc.org/sqlite"

	"ticketrelay/store/sqlitedb"
)

// IndexVersion is the migration that indexes the trail by request
// (decision 0147), the one place its number is written; the ledger's step
// of the same change (the calls in the cluster copy, decision 0146) takes
// it too.
const IndexVersion = 23

// indexStep indexes each batch under the requests its entries name:
// trail_requests holds (request key, batch seq) for every request a batch
// names, so a request's page reads its batches and no other. The writer
// computes a batch's keys before its transaction (request_keys, a JSON
// array; NULL: the batch names no request) and the triggers keep the
// index with the batches: written with each, deleted with each by
// retention. A key is a 63-bit hash of the scoped id, not the id: eight
// bytes a row where an id takes up to 512; an entry of another request
// under the same key is read and left out.
//
// The batches stored before are keyed here by trail_request_keys, the
// same function registered with the driver; the append-only trigger is
// set aside for that one update of a column that did not exist.
var indexStep = sqlitedb.Step{Version: IndexVersion, SQL: `
ALTER TABLE trail ADD COLUMN request_keys TEXT;
CREATE TABLE trail_requests (
	rkey INTEGER NOT NULL, -- requestKey of a scoped request id
	seq  INTEGER NOT NULL, -- a batch (trail.seq) with entries of that request
	PRIMARY KEY (rkey, seq)
) WITHOUT ROWID;
CREATE TRIGGER trail_index AFTER INSERT ON trail WHEN new.request_keys IS NOT NULL
BEGIN INSERT OR IGNORE INTO trail_requests (rkey, seq) SELECT value, new.seq FROM json_each(new.request_keys); END;
CREATE TRIGGER trail_unindex AFTER DELETE ON trail WHEN old.request_keys IS NOT NULL
BEGIN DELETE FROM trail_requests WHERE rkey IN (SELECT value FROM json_each(old.request_keys)) AND seq = old.seq; END;
DROP TRIGGER trail_append_only;
UPDATE trail SET request_keys = trail_request_keys(entries);
INSERT OR IGNORE INTO trail_requests (rkey, seq) SELECT j.value, t.seq FROM trail t, json_each(t.request_keys) j;
CREATE TRIGGER trail_append_only BEFORE UPDATE ON trail
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;`}

// requestKey is the index's key of a scoped request id: FNV-1a, 63 bits
// (a JSON number SQLite reads as an integer).
func requestKey(scopedID string) int64 {
	h := fnv.New64a()
	h.Write([]byte(scopedID))
	return int64(h.Sum64() >> 1)
}

// requestKeys is the JSON array of the distinct keys of the requests
// entries name; nil if they name none.
func requestKeys(entries []Entry) any {
	keys := make([]int64, 0, len(entries))
	for _, e := range entries {
		if e.RequestID != "" {
			keys = append(keys, requestKey(e.RequestID))
		}
	}
	return keysJSON(keys)
}

func keysJSON(keys []int64) any {
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	b := []byte{'['}
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, k, 10)
	}
	return string(append(b, ']'))
}

// The migration's function: the keys of a stored batch's JSON lines.
func init() {
	sqlite.MustRegisterDeterministicScalarFunction("trail_request_keys", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		var data []byte
		switch v := args[0].(type) {
		case []byte:
			data = v
		case string:
			data = []byte(v)
		default:
			return nil, nil
		}
		var keys []int64
		for line := range bytes.SplitSeq(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			var e struct {
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(line, &e); err != nil {
				return nil, err
			}
			if e.RequestID != "" {
				keys = append(keys, requestKey(e.RequestID))
			}
		}
		return keysJSON(keys), nil
	})
}
