package dispatcher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/installation"
	"ticketrelay/internal/app"
	"ticketrelay/internal/operate"
	"ticketrelay/store/clusterrec"
)

// addClusterFlags declares the flags with which `dispatcher status` looks
// at a multi-host installation's cluster. They are the dispatcher's own
// (same names, same environment twins), so an operator runs status with
// the environment of the dispatcher's unit and gets its installation.
func addClusterFlags(fs *flag.FlagSet) app.NATSFlags {
	fs.Bool("multi-host", false, "also show the installation's hosts, stream and request bucket (needs -nats and -installation)")
	fs.Duration("host-dead-after", 30*time.Second, "with -multi-host: the dispatchers' -host-dead-after (a host silent this long is shown as silent)")
	return addClusterConnFlags(fs)
}

// addClusterConnFlags declares the flags that name the installation and
// connect to its cluster (forget-host's, and status's with the others).
func addClusterConnFlags(fs *flag.FlagSet) app.NATSFlags {
	url := fs.String("nats", "", "`URL`s of the installation's NATS cluster (the dispatchers' -nats)")
	fs.String("installation", "", "the installation's `name` (the dispatchers' -installation)")
	return app.AddNATSFlags(fs, url)
}

// clusterStatusOf looks at the cluster when status runs with -multi-host;
// nil without it. A view with errors is returned with them. It also
// copies into l the settled outcomes of l's published requests that other
// hosts' forwarders recorded in the cluster record (what the audit does
// after -audit-after): the ledger then counts them as the installation
// does, not as waiting or retrying.
func clusterStatusOf(ctx context.Context, fs *flag.FlagSet, natsOpts []nats.Option, l adminStore) (*operate.ClusterView, error) {
	if flagValue(fs, "multi-host") != "true" {
		return nil, nil
	}
	deadAfter, err := time.ParseDuration(flagValue(fs, "host-dead-after"))
	if err != nil || deadAfter < time.Second {
		return nil, fmt.Errorf("%w: -host-dead-after must be at least 1s", app.ErrUsage)
	}
	c, err := connectCluster(fs, natsOpts, "status -multi-host")
	if err != nil {
		return nil, err
	}
	defer c.nc.Close()
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	store, err := clusterrec.Inspect(ictx, c.js, c.inst)
	cancel()
	var errs []string
	if err != nil {
		if errors.Is(err, clusterrec.ErrForeignBucket) {
			return nil, err
		}
		errs = append(errs, err.Error())
		store = nil
	}
	v := operate.LookAtCluster(ctx, c.js, store, c.inst, deadAfter, time.Now())
	if al, ok := l.(clusterrec.AuditLedger); ok && store != nil {
		if err := mirrorSettled(ctx, store, al); err != nil {
			errs = append(errs, fmt.Sprintf("outcomes recorded by other hosts: %v (the counts below may show them as waiting)", err))
		}
	}
	if len(errs) > 0 {
		v.Errors = append(errs, v.Errors...)
	}
	return &v, nil
}

// mirrorSettled walks l's published requests and copies the settled
// outcome the cluster record holds of each that l does not know settled.
func mirrorSettled(ctx context.Context, store *clusterrec.Store, l clusterrec.AuditLedger) error {
	ctx, cancel := context.WithTimeout(ctx, mirrorFor)
	defer cancel()
	a := clusterrec.NewAuditStore(store, l, 0, time.Now)
	for after := int64(0); ; {
		ps, err := a.PublishedAfter(ctx, after, 1000)
		if err != nil || len(ps) == 0 {
			return err
		}
		after = ps[len(ps)-1].ID
	}
}

// mirrorFor bounds mirrorSettled: status answers even when the bucket
// does not.
const mirrorFor = time.Minute

// clusterConn is one operator command's connection to the installation's
// cluster.
type clusterConn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	inst installation.Name
}

// connectCluster connects to -nats for the installation of -installation,
// once: an operator command answers now, without the services' patient
// reconnects. what names the command in usage errors.
func connectCluster(fs *flag.FlagSet, natsOpts []nats.Option, what string) (clusterConn, error) {
	url := flagValue(fs, "nats")
	inst, err := installation.Parse(flagValue(fs, "installation"))
	if err != nil {
		return clusterConn{}, fmt.Errorf("%w: -installation: %v", app.ErrUsage, err)
	}
	if url == "" || inst == installation.Embedded {
		return clusterConn{}, fmt.Errorf("%w: %s needs -nats URL and -installation NAME (the dispatchers' own)", app.ErrUsage, what)
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("ticketrelay-admin"), nats.Timeout(5 * time.Second), nats.NoReconnect()}, natsOpts...)...)
	if err != nil {
		return clusterConn{}, fmt.Errorf("cluster: nats %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return clusterConn{}, fmt.Errorf("cluster: jetstream: %w", err)
	}
	return clusterConn{nc: nc, js: js, inst: inst}, nil
}

// adminForgetHost deletes the heartbeat of a host removed for good, once
// the other hosts have finished adopting it (clusterrec.ForgetHost): it
// leaves status and the host-lost alert.
func adminForgetHost(ctx context.Context, _ adminStore, fs *flag.FlagSet, natsOpts []nats.Option, args []string, out io.Writer) error {
	if len(args) != 1 || args[0] == "" {
		return fmt.Errorf("%w: forget-host takes one host id (the HOST column of status -multi-host)", app.ErrUsage)
	}
	c, err := connectCluster(fs, natsOpts, "forget-host")
	if err != nil {
		return err
	}
	defer c.nc.Close()
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	store, err := clusterrec.Inspect(ictx, c.js, c.inst)
	if err != nil {
		return err
	}
	// The command has no database: the action is recorded in the
	// installation's trail stream, where every host's trail is read.
	who := operate.CommandLine(optionalFlag(fs, "operator"), streamRecorder{c})
	if err := operate.ForgetHost(ictx, store, who, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(out, "forgot host %s of installation %s: it is no longer listed or alerted on; if it runs again, it rejoins\n", args[0], c.inst)
	return nil
}

// printCluster writes the view under the ledger's status.
func printCluster(out io.Writer, v *operate.ClusterView) {
	fmt.Fprintf(out, "\ninstallation %s (multi-host)\n", v.Installation)
	for _, r := range []struct {
		what string
		v    *operate.ResourceView
	}{{"stream", v.Stream}, {"request bucket", v.Bucket}} {
		if r.v == nil {
			fmt.Fprintf(out, "%s: no answer\n", r.what)
			continue
		}
		leader := r.v.Leader
		if leader == "" {
			leader = "NONE (no quorum: writes are refused)"
		}
		fmt.Fprintf(out, "%s %s: R%d, leader %s, %d messages, %s", r.what, r.v.Name, r.v.Replicas, leader, r.v.Messages, bytesText(r.v.Bytes))
		if r.v.MaxBytes > 0 {
			fmt.Fprintf(out, " of %s (%.0f%%; new requests are refused from %.0f%%)", bytesText(uint64(r.v.MaxBytes)),
				100*float64(r.v.Bytes)/float64(r.v.MaxBytes), 100*clusterrec.Headroom)
		} else if r.v == v.Bucket {
			fmt.Fprint(out, " (no limit)")
		}
		fmt.Fprintln(out)
		var peers []string
		for _, p := range r.v.Peers {
			if p.Name == "" {
				continue
			}
			peers = append(peers, p.Name+" "+peerText(p))
		}
		if len(peers) > 0 {
			fmt.Fprintf(out, "  replicas: %s\n", strings.Join(peers, ", "))
		}
	}
	if v.Hosts != nil {
		fmt.Fprintf(out, "\n")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		// The entry's time is the last beat of a live or silent host, and
		// the moment another host marked it of an adopting or adopted one.
		fmt.Fprintln(tw, "HOST\tHOSTNAME\tSTATE\tLAST ENTRY\t")
		for _, h := range v.Hosts {
			state := h.State
			if h.AdoptedBy != "" {
				state += " by " + h.AdoptedBy
			}
			if h.Finished {
				state += ", finished (if removed for good: dispatcher forget-host " + h.Host + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t\n", h.Host, h.Hostname, state, secondsText(h.LastEntryAgeSeconds))
		}
		tw.Flush()
		if len(v.Hosts) == 0 {
			fmt.Fprintln(out, "no host has beaten yet")
		}
	}
	if len(v.Errors) > 0 {
		fmt.Fprintf(out, "\nthe cluster did not answer everything (no quorum, or the server unreachable):\n")
		for _, e := range v.Errors {
			fmt.Fprintf(out, "  %s\n", e)
		}
	}
}

func peerText(p operate.PeerView) string {
	switch {
	case p.Leader:
		return "(leader)"
	case p.Offline:
		return "(offline)"
	case !p.Current && p.ActiveSeconds > 0:
		return "(not current: " + strconv.FormatUint(p.Lag, 10) + " ops behind, last seen " + secondsText(p.ActiveSeconds) + " ago)"
	case !p.Current:
		return "(not current: " + strconv.FormatUint(p.Lag, 10) + " ops behind)"
	}
	return "(current)"
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// errClusterIncomplete: status printed what the cluster answered, and some
// of it did not answer; the exit status says so.
var errClusterIncomplete = errors.New("the cluster did not answer every question")

func clusterErr(v *operate.ClusterView) error {
	if v == nil || len(v.Errors) == 0 {
		return nil
	}
	return fmt.Errorf("status: %w: %s", errClusterIncomplete, strings.Join(v.Errors, "; "))
}

func secondsText(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}
