package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"ticketrelay/delivery/natsjs"
	"ticketrelay/installation"
	"ticketrelay/internal/app"
	"ticketrelay/internal/app/dispatcher"
	"ticketrelay/internal/archetype"
	"ticketrelay/request"
	"ticketrelay/store/clusterrec"
	"ticketrelay/store/ledger"
	"ticketrelay/testkit/fixture"
	"ticketrelay/ticket"
)

// `status -multi-host` against a real (embedded, single-node) JetStream
// server holding an installation's stream, bucket and one heartbeat: the
// installation, the host, the replicas and the bucket against its limit
// under the ledger's part; a missing bucket is an error that says so,
// after what could be shown; -multi-host without -nats is a usage error.
// The clustered case (leaders, lagging replicas, a lost host, no quorum)
// is testkit/e2e/multihost's TestOperatorsView.
func TestAdminStatusMultiHost(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-delivered", "support", string(request.StatusDelivered), 1, "", "4711")
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ns, js := embeddedCluster(t)
	const inst installation.Name = "ops"
	store, err := clusterrec.Open(ctx, archetype.Archetype{Logger: log}, js, clusterrec.Config{Installation: inst, Host: "host-1", Replicas: 1, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	none := func(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
	if err := clusterrec.NewHosts(archetype.Archetype{Logger: log}, clusterrec.HostsConfig{}, store, a.l, none).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}

	out, err := a.admin(t, "status", "-multi-host", "-nats", ns.ClientURL(), "-installation", string(inst))
	if err != nil {
		t.Fatalf("status -multi-host: %v\n%s", err, out)
	}
	for _, want := range []string{"dispatchers running: 0", "installation ops (multi-host)",
		"stream ticketrelay-ops: R1, leader ticketrelay-embedded, 0 messages",
		"request bucket KV_ticketrelay-ops-requests: R1, leader ticketrelay-embedded, 1 messages",
		"of 1.0 MiB (0%; new requests are refused from 90%)", "host-1", "live"} {
		if !strings.Contains(out, want) {
			t.Errorf("status -multi-host does not say %q:\n%s", want, out)
		}
	}

	js1, err := a.admin(t, "status", "-json", "-multi-host", "-nats", ns.ClientURL(), "-installation", string(inst))
	if err != nil {
		t.Fatalf("status -json -multi-host: %v", err)
	}
	var s struct {
		Backlog int64 `json:"backlog"`
		Cluster struct {
			Installation string `json:"installation"`
			Bucket       struct {
				Replicas int   `json:"replicas"`
				MaxBytes int64 `json:"max_bytes"`
				Bytes    int64 `json:"bytes"`
			} `json:"bucket"`
			Hosts []struct {
				Host  string `json:"host"`
				State string `json:"state"`
			} `json:"hosts"`
			Errors []string `json:"errors"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(js1), &s); err != nil {
		t.Fatalf("status -json -multi-host: %v\n%s", err, js1)
	}
	c := s.Cluster
	if c.Installation != "ops" || c.Bucket.Replicas != 1 || c.Bucket.MaxBytes != 1<<20 || c.Bucket.Bytes == 0 ||
		len(c.Hosts) != 1 || c.Hosts[0].Host != "host-1" || c.Hosts[0].State != "live" || c.Errors == nil || len(c.Errors) != 0 {
		t.Errorf("status -json -multi-host: %+v\n%s", c, js1)
	}

	// Without -multi-host: the ledger's status only, as before.
	plain, err := a.admin(t, "status")
	if err != nil || strings.Contains(plain, "installation") || !strings.Contains(plain, "dispatchers running: 0") {
		t.Errorf("status without -multi-host: %v\n%s", err, plain)
	}

	// An installation with no bucket on this server: said, and an error.
	out, err = a.admin(t, "status", "-multi-host", "-nats", ns.ClientURL(), "-installation", "nobody")
	if err == nil || errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "no request bucket") {
		t.Errorf("status of an installation without a bucket: %v; want an error naming the missing bucket", err)
	}
	if !strings.Contains(out, "installation nobody (multi-host)") || !strings.Contains(out, "request bucket: no answer") {
		t.Errorf("status of an installation without a bucket:\n%s", out)
	}

	if _, err := a.admin(t, "status", "-multi-host", "-installation", "ops"); !errors.Is(err, app.ErrUsage) {
		t.Errorf("status -multi-host without -nats: %v; want a usage error", err)
	}
}

// A status of the ledger alone connects to nothing: it works under the
// dispatcher unit's environment, NATS password included, whose -nats-user
// check belongs to the commands that connect (issue #38).
func TestAdminStatusIgnoresNATSCredentials(t *testing.T) {
	a := newAdminDB(t)
	a.request(t, "req-delivered", "support", string(request.StatusDelivered), 1, "", "4711")
	env := newEnv("TICKETRELAY_NATS_PASSWORD", "secret")
	out, _, err := runOnce(t, dispatcher.Run, env, "status", "-json", "-db", a.path)
	if err != nil || !strings.Contains(out, `"delivered": 1`) {
		t.Fatalf("status -json with a NATS password in the environment: %v\n%s", err, out)
	}
	_, _, err = runOnce(t, dispatcher.Run, env, "status", "-multi-host", "-nats", "nats://127.0.0.1:1", "-installation", "ops", "-db", a.path)
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "-nats-user") {
		t.Fatalf("status -multi-host with a password and no -nats-user: %v; want the usage error", err)
	}
}

// embeddedCluster is an embedded single-node JetStream holding the stream
// of installation "ops".
func embeddedCluster(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	n := fixture.StartNATSWithStream(t, natsjs.StreamConfig{Installation: "ops", Replicas: 1, Owner: natsjs.OwnerCluster})
	return n.Server, n.JS
}

// status -multi-host counts as the installation does: a request this host
// accepted and published, which another host's forwarder delivered, is
// delivered in its counts, not waiting (issue #38: "waiting 1161" with
// everything delivered, until the audit ran minutes later).
func TestAdminStatusMultiHostCountsOtherHostsDeliveries(t *testing.T) {
	a, other := newAdminDB(t), newAdminDB(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ns, js := embeddedCluster(t)
	arch := archetype.Archetype{Logger: log}
	open := func(host string) *clusterrec.Store {
		s, err := clusterrec.Open(ctx, arch, js, clusterrec.Config{Installation: "ops", Host: host, Replicas: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mine, theirs := open("host-1"), open("host-2")
	req := ticket.Request{RequestID: "req-elsewhere", Tool: "create_ticket", Target: "support", Title: "delivered by host-2", Labels: []string{"ops"}}
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := clusterrec.NewFront(arch, mine, a.l).Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := a.w.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ?, stream_seq = 1`, time.Now().UnixNano())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d := clusterrec.NewDeliveries(theirs, other.l, time.Now)
	for _, rec := range []request.Delivery{
		{RequestID: "req-elsewhere", Target: "support", State: request.DeliveryAttempting, Attempts: 1},
		{RequestID: "req-elsewhere", Target: "support", State: string(request.StatusDelivered), Attempts: 1, Version: 1, ExternalID: "4712"},
	} {
		if err := d.RecordDelivery(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	counts := func(args ...string) ledger.TargetCounts {
		out, err := a.admin(t, append([]string{"status", "-json"}, args...)...)
		if err != nil {
			t.Fatalf("status %v: %v\n%s", args, err, out)
		}
		var s struct {
			Targets []ledger.TargetCounts `json:"targets"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil || len(s.Targets) != 1 {
			t.Fatalf("status %v: %v\n%s", args, err, out)
		}
		return s.Targets[0]
	}
	if c := counts(); c.Waiting != 1 || c.Delivered != 0 {
		t.Fatalf("the ledger alone before status -multi-host: %+v; want it waiting (the test's premise)", c)
	}
	if c := counts("-multi-host", "-nats", ns.ClientURL(), "-installation", "ops"); c.Waiting != 0 || c.Delivered != 1 {
		t.Errorf("status -multi-host of a request another host delivered: %+v; want delivered", c)
	}
	if st := a.find(t, "req-elsewhere"); st.Status != request.StatusDelivered || st.ExternalID != "4712" {
		t.Errorf("the ledger after status -multi-host: %+v", st)
	}
}
