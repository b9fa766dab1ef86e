// Package e2e holds the end-to-end tests of ticketrelay: they build
// cmd/mcp-front and cmd/dispatcher once, run them as real processes on
// loopback ports, drive them with the go-sdk MCP client over streamable HTTP
// and stdio, and check the tickets that come out of the local target, the
// SQLite file, JetStream and the /metrics endpoints.
//
// The package has no code of its own outside its tests.
package e2e
