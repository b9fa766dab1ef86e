// Package redmine holds the tests of the redmine target against a real
// Redmine (Debian's redmine package, started once for the package by
// testkit/scripts/redmine-up.sh): the whole pipeline (an MCP client → mcp-front →
// SQLite → dispatcher → Redmine's REST API) with a lost answer and a
// dispatcher killed between the call and the ack, and the adapter call by
// call. They run with TICKETRELAY_REDMINE=1 (make test-redmine) and skip
// otherwise. Issues are counted through Redmine's own API, in a fresh
// project per test. It has no code of its own, only tests.
package redmine
