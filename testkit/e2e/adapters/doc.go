// Package adapters holds the end-to-end tests of the whole pipeline toward
// every downstream kind: an MCP client over streamable HTTP → mcp-front →
// one SQLite file → the dispatcher's relay → embedded JetStream → the
// forwarder → the adapter → an httptest fake of the third-party API. Both
// processes run in-process (internal/app), with real components only; the
// fakes inject the faults (lost responses, 5xx, 429, bad credentials,
// validation errors). It has no code of its own, only tests.
package adapters
