package front

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/internal/app"
	"ticketrelay/internal/archetype"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
)

// joinCluster connects to the installation's NATS cluster and binds its
// request bucket: the tools then accept through the cluster record.
func joinCluster(ctx context.Context, url, name string, natsOpts []nats.Option, l *ledger.Ledger, log *slog.Logger) (*clusterrec.Front, func(), error) {
	inst, _ := installation.Parse(name) // Options.Validate checked it
	host, err := l.ID(ctx)
	if err != nil {
		return nil, nil, err
	}
	nc, err := app.ConnectNATS(ctx, url, "ticketrelay-mcp-front", natsOpts, log)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	store, err := clusterrec.Bind(ctx, archetype.Archetype{Logger: log}, js, clusterrec.Config{Installation: inst, Host: host})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	log.Info("multi-host: acceptance decided by the cluster record", "installation", inst.String(), "bucket", inst.Bucket(), "host", host)
	return clusterrec.NewFront(archetype.Archetype{Logger: log.With("component", "cluster")}, store, l), nc.Close, nil
}
