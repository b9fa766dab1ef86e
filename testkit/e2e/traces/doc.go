// Package traces holds the tracing tests over the real binaries and a real
// Jaeger (make test-traces builds it into a cache directory and sets
// TICKETRELAY_JAEGER to the binary; without it the tests skip): a
// ticket's trace is read back through Jaeger's query API and must span
// mcp-front, the dispatcher and the downstream. Two hosts on a real
// nats-server cluster: a ticket one host accepted and published and
// another host's forwarder delivered is one trace; a ticket one host
// accepted and another adopted and delivered is the accepting call's trace
// and the adoption's, linked.
package traces
