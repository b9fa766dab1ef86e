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
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "tool_calls_total",
			Help: "MCP tool calls by tool and outcome (created, replayed, conflict, invalid, error, ok).",
		}, []string{"tool", "outcome"}),
		CallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "tool_call_duration_seconds",
			Help:    "Time to answer an MCP tool call, by tool.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"tool"}),
		Replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "replays_total",
			Help: "Calls answered from the idempotency ledger without writing anything.",
		}, []string{"tool"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "request_id_conflicts_total",
			Help: "Calls that reused a request_id with different arguments.",
		}, []string{"tool"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "invalid_calls_total",
			Help: "Calls rejected by validation before anything was written, by tool and argument.",
		}, []string{"tool", "argument"}),
		HTTPRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "http_refused_total",
			Help: "HTTP requests refused by mcp-front's own checks and limits, by reason (bad_session_id, foreign_origin, body_too_large, body_timeout, bad_message, unauthenticated, auth_throttled, rate_limited, session_limit, client_session_limit, foreign_host, no_session, reinitialize).",
		}, []string{"reason"}),
		HTTPSessionsEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "http_sessions_evicted_total",
			Help: "MCP sessions closed by mcp-front for having made no call since their initialize, by reason (unused_timeout; table_full, client_full: to admit a new session at -max-sessions or at a client's share).",
		}, []string{"reason"}),
		Writer: newWriter(),
	}
	reg.MustRegister(f.ToolCalls, f.CallDuration, f.Replays, f.Conflicts, f.Rejected, f.HTTPRefused, f.HTTPSessionsEvicted)
	f.Writer.register(reg)
	return f
}
