// Package interop holds the interoperability checks of mcp-front that need
// more than the Go toolchain: run.sh (`make interop`) drives the official MCP
// conformance suite and the MCP Inspector CLI, pinned in package.json, and
// stdio_test.go holds mcp-front's stdout to strict JSON-RPC over 1,000 calls.
package interop
