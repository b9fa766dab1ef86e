package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Front holds the collectors of mcp-front.
type Front struct {
	ToolCalls    *prometheus.CounterVec   // tool, outcome
	CallDuration *prometheus.HistogramVec // tool
	Replays      *prometheus.CounterVec   // tool
	Conflicts    *prometheus.CounterVec   // tool
	Rejected     *prometheus.CounterVec   // tool, reason
	HTTPRefused  *prometheus.CounterVec   // reason
	// ToolRefused counts the calls refused because the configuration's
	// grants do not give the tool to the caller, by tool.
	ToolRefused *prometheus.CounterVec // tool
	// HTTPSessionsEvicted counts the sessions closed for having made no
	// call since their initialize, by reason.
	HTTPSessionsEvicted *prometheus.CounterVec // reason
	Writer              *Writer
}

// SessionsFunc registers the gauge of live streamable-HTTP sessions, read
// from sessions when scraped.
func SessionsFunc(reg prometheus.Registerer, sessions func() int) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "http_sessions",
		Help: "Live MCP sessions over streamable HTTP (bounded by -max-sessions).",
	}, func() float64 { return float64(sessions()) }))
}

// Tool call outcomes used as the "outcome" label of ToolCalls.
const (
	CallCreated  = "created"
	CallReplayed = "replayed"
	CallConflict = "conflict"
	CallInvalid  = "invalid"
	CallError    = "error"
	CallOK       = "ok"
)

// NewFront creates the mcp-front collectors and registers them on reg.
func NewFront(reg prometheus.Registerer) *Front {
	f := &Front{
		ToolCalls: newCounterVec("tool_calls_total",
			"MCP tool calls by tool and outcome (created, replayed, conflict, invalid, error, ok).", "tool", "outcome"),
		CallDuration: newHistogramVec("tool_call_duration_seconds",
			"Time to answer an MCP tool call, by tool.",
			[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}, "tool"),
		Replays: newCounterVec("replays_total",
			"Calls answered from the idempotency ledger without writing anything.", "tool"),
		Conflicts: newCounterVec("request_id_conflicts_total",
			"Calls that reused a request_id with different arguments.", "tool"),
		Rejected: newCounterVec("invalid_calls_total",
			"Calls rejected by validation before anything was written, by tool and argument.", "tool", "argument"),
		HTTPRefused: newCounterVec("http_refused_total",
			"HTTP requests refused by mcp-front's own checks and limits, by reason (bad_session_id, foreign_origin, body_too_large, body_timeout, bad_message, unauthenticated, insufficient_scope, auth_throttled, rate_limited, session_limit, client_session_limit, foreign_host, no_session, reinitialize).", "reason"),
		ToolRefused: newCounterVec("tool_calls_refused_total",
			"Tool calls refused, nothing written, because no grant of the configuration gives the tool to the caller (a tool error, or over HTTP a 403 insufficient_scope step-up), by tool.", "tool"),
		HTTPSessionsEvicted: newCounterVec("http_sessions_evicted_total",
			"MCP sessions closed by mcp-front for having made no call since their initialize, by reason (unused_timeout; table_full, client_full: to admit a new session at -max-sessions or at a client's share).", "reason"),
		Writer: newWriter(),
	}
	reg.MustRegister(f.ToolCalls, f.CallDuration, f.Replays, f.Conflicts, f.Rejected, f.HTTPRefused, f.ToolRefused, f.HTTPSessionsEvicted)
	f.Writer.register(reg)
	return f
}
