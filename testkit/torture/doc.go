// Package torture is ticketrelay's fault-injection harness: a Jepsen-style
// run that records a history and checks it afterwards.
//
// Run starts the six third-party fakes in-process (webhook, Zendesk and
// PagerDuty take a dedupe key; GitHub, Jira and Slack do not), an external
// nats-server, the dispatcher and mcp-front as subprocesses, and drives them
// with concurrent MCP callers that cut their TCP connections mid-call, time
// out, and retry with the same request_id on new sessions (following the
// agent protocol of find_request for tools without idempotentHint). Meanwhile
// a scheduler driven by a seeded RNG kills the three processes with SIGKILL at
// random moments (and arms failpoints that kill them at exact points), deletes
// and purges the stream through the JetStream API, and the fakes lose
// responses, answer 500 or 429, hang and reset connections.
//
// In every run but the power-cut one, two requests in five (once a caller
// has a ticket) are add_comment and update_ticket calls on the caller's
// own tickets, often before their create is delivered, and comments on a
// Slack thread ticketrelay did not post; the fakes also lose and refuse
// comment calls. Across hosts they go through the proxy, so to any host,
// whichever host filed the ticket. The checker then holds that no comment
// lands twice (exactly once where a key or a consistent lookup exists, at
// most once plus uncertain on Slack) and that each ticket's fields at its
// fake are those of its last updates: in the ledger's acceptance order on
// one host, in the order of their acknowledgements across hosts
// (decisions 0183, 0198).
//
// In every run but the power-cut one, three creates in ten carry a
// fingerprint from a pool of two per caller, each bound to one target, so
// that several requests share one; across hosts they go through the proxy
// to every host. The checker holds one ticket per interval in which a
// group is open (closed by an accepted closing update), exactly one
// ticket at the fake, every answer naming it and saying grouped exactly
// when the report joined it, each occurrence comment held once. On one
// host the ledger's order places reports and closes; across hosts each
// request spans from when it was made up to its last call, and requests
// whose spans overlap may have been decided either way (decisions 0196,
// 0198).
//
// When the faults stop, Run waits (bounded) until every accepted request is
// settled, then Check reads the history, the fakes' records and the SQLite
// file (read-only) and reports one line per property, and the counts that let
// a run be quoted. A failing run prints its seed; the same seed replays the
// same decisions (the timing of a real system is not replayable).
package torture
