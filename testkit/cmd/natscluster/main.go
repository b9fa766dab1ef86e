// Command natscluster runs a local nats-server cluster (package
// testkit/natscluster) until SIGINT or SIGTERM: n1..nN on loopback, one
// cluster, JetStream with sync_interval: always on every node. It prints
// the client URLs on stderr and writes them to DIR/client-urls, for
// `nats.Connect` or the dispatcher's -nats flag. The nodes' configuration
// files, stores and logs stay in DIR. Exit status: 0 after a signal, 1 if
// the cluster could not start, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"ticketrelay/testkit/natscluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr)
	var usage usageError
	switch {
	case errors.As(err, &usage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "natscluster:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("natscluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "`directory` for the configuration files, stores and logs (default: a new temporary directory)")
	nodes := fs.Int("nodes", 3, "number of nodes")
	bin := fs.String("bin", "", "nats-server `binary` (default: built from the module's pinned nats-server/v2 into DIR/bin)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "natscluster: unexpected arguments", fs.Args())
		return usageError{errors.New("unexpected arguments")}
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "ticketrelay-natscluster-")
		if err != nil {
			return err
		}
		*dir = d
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	c, err := natscluster.Start(ctx, natscluster.Config{Dir: *dir, Nodes: *nodes, Bin: *bin, Log: log})
	if err != nil {
		return err
	}
	defer c.Close()
	urlFile := filepath.Join(*dir, "client-urls")
	if err := os.WriteFile(urlFile, []byte(c.ClientURLs()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "natscluster: %d nodes ready; client URLs (also in %s):\n%s\n", c.Size(), urlFile, c.ClientURLs())
	<-ctx.Done()
	fmt.Fprintln(stderr, "natscluster: stopping")
	return c.Close()
}
