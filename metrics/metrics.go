// Package metrics holds the Prometheus collectors of both processes.
//
// Every collector is registered on a prometheus.Registerer that the caller
// injects; nothing here touches the global registry. All names carry the
// "ticketrelay_" prefix and every label takes a bounded set of values (tool
// names, target names and fixed outcome words, never request ids).
package metrics

const namespace = "ticketrelay"
