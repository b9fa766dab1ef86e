//go:build ticketrelay_notracing

package tracing

// builtIn false makes Enabled a constant false: the compiler drops every
// guarded tracing call, and what remains is the code without tracing, for
// an A/B against the same build with tracing off (decision 0164).
const builtIn = false
