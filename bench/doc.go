// Package bench is ticketrelay's benchmark harness (`make bench`): a load
// generator that drives real mcp-front and dispatcher processes on loopback
// with the go-sdk MCP client, and prints one table in which every figure
// stands next to a baseline measured in the same run, with the ratio and the
// target it is held to. The machines it runs on are shared and noisy, so the
// targets are ratios, never absolute times, and nothing here is asserted by
// `make test`.
//
// Scenarios (issue 6):
//
//  1. create_ticket over streamable HTTP at 1, 8 and 32 sessions vs the
//     bench_noop_create_ticket twin on the same mcp-front build
//     (mcp-front -bench-noop-tool).
//  2. the same vs go-sdk's default no-op server (bench/noopserver), with the
//     server CPU per call of both.
//  3. replay of scenario 1's calls with the same request_ids.
//  4. the relay draining an outbox backlog vs a raw JetStream async publish
//     loop against the same embedded server settings.
//  5. commit → delivered lag through the local target at half load: half of
//     what the whole pipeline sustains (scenario 7's closed-loop
//     throughput), then (for information) at half of scenario 1's
//     throughput, the pace before decision 0097, and at a moderate 100
//     tickets/s.
//  6. scenario 1 at 32 sessions on a ledger that already holds many rows.
//  7. peak RSS of mcp-front and dispatcher during scenario 1 at 32 sessions.
//  8. a backlog of accepted tickets (issue 22) delivered by a dispatcher to a
//     webhook receiver in its own process (bench/receiver), from the
//     dispatcher's start until the receiver holds every key, vs River on
//     SQLite doing the same job (bench/riverbaseline, a module of its own)
//     and plain concurrent POSTs (the ceiling); dispatcher CPU per ticket,
//     duplicates and new connections at the receiver; then the same
//     against a receiver that answers in 50 ms; then the peak RSS of a
//     draining dispatcher, with its embedded nats-server and with the
//     broker as a process of its own (-nats).
//  9. multi-host mode (issue 19) on a 3-node nats-server cluster: cluster
//     record Claim+Accept latency on R3 vs R1 at 1, 16 and 64 callers;
//     create_ticket on two hosts vs one; the longest time with no call
//     accepted after SIGKILL of the bucket's and the stream's leaders; the
//     record's disk and memory per request (cluster*.go).
//  10. issue 34: create_ticket at the top session count with signed-in
//     users' JWTs validated against an issuer's JWKS vs static bearer
//     tokens, and with the audit trail on vs -audit=false (scenario10.go).
//  13. issue 35: add_comment on the run's own tickets vs create_ticket on
//     one mcp-front at the top session count, alternated windows
//     (scenario13.go; its number is the constant commentScenario).
//
// mcp-front's -bench-noop-tool (env TICKETRELAY_BENCH_NOOP_TOOL) is for
// this harness only and is not listed by -help: it also serves
// bench_noop_<tool>, a twin of each create tool that validates its
// arguments, records its metrics and writes nothing. The harness starts
// mcp-front with -create-db, on a fresh ledger of its own.
//
// The harness is Linux-only: it reads CPU time and peak RSS from /proc.
package bench
