package natscluster

import (
	"fmt"
	"strings"
)

// NodeAddrs is what the harness chose for one node: its name, listen
// addresses, store and route addresses. A Config.Render function must put
// every one of them in the node's configuration.
type NodeAddrs struct {
	Index   int    // 0-based position in the cluster
	Name    string // server_name: "n<Index+1>"
	Cluster string // cluster name, the same on every node
	Client  string // listen: host:port for clients
	HTTP    string // http: host:port of the monitoring endpoints
	Route   string // cluster { listen: host:port } (the node's own route listener)
	// Advertise is the route address the node tells its peers (its own
	// proxy): cluster { advertise: ... }. Without it a peer that learns of
	// the node by gossip dials the route listener directly, past the
	// proxy, and Partition could not cut that connection.
	Advertise string
	Routes    []string // nats-route:// URLs of the other nodes' proxies
	StoreDir  string   // jetstream { store_dir: ... }
}

// render is the harness's own configuration of a node: JetStream with
// sync_interval: always (a PubAck then means "fsynced" on every replica),
// the routes through the proxies, and the caller's extra text.
func render(a NodeAddrs, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by ticketrelay/internal/natscluster: node %s of cluster %q.\n", a.Name, a.Cluster)
	fmt.Fprintf(&b, "server_name: %s\n", a.Name)
	fmt.Fprintf(&b, "listen: %q\n", a.Client)
	fmt.Fprintf(&b, "http: %q\n", a.HTTP)
	b.WriteString("\njetstream {\n")
	fmt.Fprintf(&b, "  store_dir: %q\n", a.StoreDir)
	b.WriteString("  # fsync every write before it is acknowledged, on every node: the setting\n")
	b.WriteString("  # is per node and a client cannot see it.\n")
	b.WriteString("  sync_interval: always\n")
	b.WriteString("}\n\ncluster {\n")
	fmt.Fprintf(&b, "  name: %q\n", a.Cluster)
	fmt.Fprintf(&b, "  listen: %q\n", a.Route)
	fmt.Fprintf(&b, "  advertise: %q\n", a.Advertise)
	b.WriteString("  routes: [\n")
	for _, r := range a.Routes {
		fmt.Fprintf(&b, "    %q\n", r)
	}
	b.WriteString("  ]\n}\n")
	if extra != "" {
		b.WriteString("\n")
		b.WriteString(extra)
		if !strings.HasSuffix(extra, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// NKeyAuth is Config.Extra for one account with JetStream and one user
// who authenticates with the nkey whose public key is pub ("U...").
func NKeyAuth(account, pub string) string {
	return fmt.Sprintf(`accounts {
  %s {
    jetstream: enabled
    users: [ { nkey: %q } ]
  }
  SYS { }
}
system_account: SYS
`, account, pub)
}
