//go:build !ticketrelay_notracing

package tracing

// builtIn is false only in a build with the tag ticketrelay_notracing: the
// benchmark's control for what tracing off costs (decision 0164). Releases
// are built without it.
const builtIn = true
