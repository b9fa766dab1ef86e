package multihost_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ticketrelay/testkit/e2eproc"
	"ticketrelay/testkit/testwait"
)

// statusJSON is the part of `dispatcher status -json` this test reads.
type statusJSON struct {
	Cluster *struct {
		Installation string `json:"installation"`
		Stream       *struct {
			Name     string `json:"name"`
			Replicas int    `json:"replicas"`
			Leader   string `json:"leader"`
			Peers    []struct {
				Name    string `json:"name"`
				Leader  bool   `json:"leader"`
				Current bool   `json:"current"`
				Offline bool   `json:"offline"`
			} `json:"peers"`
		} `json:"stream"`
		Bucket *struct {
			Name     string `json:"name"`
			Replicas int    `json:"replicas"`
			Leader   string `json:"leader"`
			Bytes    uint64 `json:"bytes"`
			MaxBytes int64  `json:"max_bytes"`
		} `json:"bucket"`
		Hosts []struct {
			Host      string `json:"host"`
			Hostname  string `json:"hostname"`
			State     string `json:"state"`
			AdoptedBy string `json:"adopted_by"`
			Finished  bool   `json:"finished"`
		} `json:"hosts"`
		Errors []string `json:"errors"`
	} `json:"cluster"`
}

// status runs `dispatcher status` for host h's database against the
// cluster, as an operator would, and returns its output and exit error.
func (in *installation) status(t *testing.T, h *host, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"status", "-data", h.dir, "-multi-host", "-nats", in.cluster.ClientURLs(),
		"-installation", installationName, "-host-dead-after", "3s"}, extra...)
	cmd := exec.Command(dispatcherBin, args...)
	cmd.Env = e2eproc.Environ()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if errOut.Len() > 0 {
		t.Logf("status stderr: %s", errOut.String())
	}
	return out.String(), err
}

// forgetHost runs `dispatcher forget-host` for host id, as an operator
// would from anywhere (no database), and returns its output and exit
// error.
func (in *installation) forgetHost(t *testing.T, id string) (string, error) {
	t.Helper()
	cmd := exec.Command(dispatcherBin, "forget-host", "-nats", in.cluster.ClientURLs(), "-installation", installationName, id)
	cmd.Env = e2eproc.Environ()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (in *installation) statusJSON(t *testing.T, h *host) statusJSON {
	t.Helper()
	out, err := in.status(t, h, "-json")
	if err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Cluster == nil {
		t.Fatalf("status -json: %v: no cluster in\n%s", err, out)
	}
	return s
}

// waitMetrics waits until cond holds on a scrape of h's dispatcher.
func (h *host) waitMetrics(t *testing.T, what string, cond func(m e2eproc.Metrics) bool) e2eproc.Metrics {
	t.Helper()
	var last e2eproc.Metrics
	if !testwait.Until(60*time.Second, func() bool {
		m, err := e2eproc.Scrape(h.disp.Addr("metrics"))
		if err != nil {
			return false
		}
		last = m
		return cond(m)
	}) {
		var cluster []string
		for name, f := range last {
			if strings.HasPrefix(name, "ticketrelay_cluster_") {
				cluster = append(cluster, f.String())
			}
		}
		t.Fatalf("dispatcher of %s: %s never held; last cluster metrics:\n%s", h.name, what, strings.Join(cluster, "\n"))
	}
	return last
}

// What an operator sees of a multi-host installation, in `dispatcher
// status` and in the dispatcher's metrics: the hosts, the replicas and
// leaders, the bucket against its limit; then a host lost and adopted, a
// node lost (a replica behind), and the quorum lost.
func TestOperatorsView(t *testing.T) {
	in := newInstallation(t)
	const maxBytes = 4 << 20
	a := in.startHost(t, "a", "-host-dead-after", "3s", "-bucket-max-bytes", "4194304")
	b := in.startHost(t, "b", "-host-dead-after", "3s", "-bucket-max-bytes", "4194304")
	a.mustCall(t, "send_hook", args("ops-1", "Seen by the operator"))
	a.waitStatus(t, "ops-1", "delivered", 30*time.Second)

	mh := []string{"installation", installationName}
	a.waitMetrics(t, "a whole view: 2 live hosts, leaders, 3 current replicas each", func(m e2eproc.Metrics) bool {
		return m.Get("ticketrelay_cluster_record_available", mh...) == 1 &&
			m.Get("ticketrelay_cluster_hosts", "state", "live") == 2 &&
			m.Get("ticketrelay_cluster_leader_known", "resource", "stream") == 1 &&
			m.Get("ticketrelay_cluster_leader_known", "resource", "bucket") == 1 &&
			m.Get("ticketrelay_cluster_replicas", "resource", "stream", "state", "current") == 3 &&
			m.Get("ticketrelay_cluster_replicas", "resource", "bucket", "state", "current") == 3 &&
			m.Get("ticketrelay_cluster_bucket_bytes") > 0 &&
			m.Get("ticketrelay_cluster_bucket_max_bytes") == maxBytes &&
			m.Get("ticketrelay_cluster_host_lost") == 0
	})

	ctx := t.Context()
	streamLeader, err := in.cluster.StreamLeader(ctx, "ticketrelay-"+installationName)
	if err != nil {
		t.Fatal(err)
	}
	bucketLeader, err := in.cluster.KVLeader(ctx, "ticketrelay-"+installationName+"-requests")
	if err != nil {
		t.Fatal(err)
	}
	hostname, _ := os.Hostname()
	s := in.statusJSON(t, a)
	c := s.Cluster
	if c.Installation != installationName || len(c.Errors) != 0 {
		t.Errorf("status: installation %q, errors %v", c.Installation, c.Errors)
	}
	if c.Stream == nil || c.Stream.Name != "ticketrelay-"+installationName || c.Stream.Replicas != 3 ||
		c.Stream.Leader != in.cluster.Name(streamLeader) || len(c.Stream.Peers) != 3 {
		t.Errorf("status: stream %+v; want ticketrelay-%s, R3, leader %s, 3 peers", c.Stream, installationName, in.cluster.Name(streamLeader))
	}
	if c.Bucket == nil || c.Bucket.Name != "KV_ticketrelay-"+installationName+"-requests" || c.Bucket.Replicas != 3 ||
		c.Bucket.Leader != in.cluster.Name(bucketLeader) || c.Bucket.MaxBytes != maxBytes || c.Bucket.Bytes == 0 {
		t.Errorf("status: bucket %+v; want R3, leader %s, a size of at most %d", c.Bucket, in.cluster.Name(bucketLeader), maxBytes)
	}
	if len(c.Hosts) != 2 {
		t.Fatalf("status: hosts %+v; want a and b", c.Hosts)
	}
	for _, h := range c.Hosts {
		if h.State != "live" || h.Hostname != hostname || h.Host == "" {
			t.Errorf("status: host %+v; want live on %s", h, hostname)
		}
	}
	text, err := in.status(t, a)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, text)
	}
	for _, want := range []string{"installation " + installationName + " (multi-host)",
		"stream ticketrelay-" + installationName + ": R3, leader " + in.cluster.Name(streamLeader),
		"request bucket KV_ticketrelay-" + installationName + "-requests: R3, leader " + in.cluster.Name(bucketLeader),
		"of 4.0 MiB", c.Hosts[0].Host, c.Hosts[1].Host, "(current)", "(leader)"} {
		if !strings.Contains(text, want) {
			t.Errorf("status does not say %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, "dispatchers running:") {
		t.Errorf("status lost the ledger's part:\n%s", text)
	}

	// Host b is lost: a adopts it, and both views say so.
	b.disp.Kill9()
	b.front.Kill9()
	<-b.disp.Done()
	m := a.waitMetrics(t, "b lost and adopted", func(m e2eproc.Metrics) bool {
		return m.Get("ticketrelay_cluster_hosts", "state", "adopted") == 1 && m.Get("ticketrelay_cluster_hosts", "state", "live") == 1 &&
			m.Get("ticketrelay_cluster_host_lost") == 1
	})
	s = in.statusJSON(t, a)
	var live, adopted string
	for _, h := range s.Cluster.Hosts {
		switch h.State {
		case "live":
			live = h.Host
		case "adopted":
			adopted = h.Host
			if h.AdoptedBy == "" {
				t.Errorf("status: adopted host %+v names no adopter", h)
			}
		}
	}
	if live == "" || adopted == "" {
		t.Fatalf("status after b was lost: %+v", s.Cluster.Hosts)
	}
	if m.Get("ticketrelay_cluster_host_lost", "host", adopted, "hostname", hostname) != 1 ||
		m.Get("ticketrelay_cluster_host_lost", "host", live) != 0 {
		t.Errorf("host_lost does not name %s lost and %s live: %v", adopted, live, m["ticketrelay_cluster_host_lost"])
	}
	for _, h := range s.Cluster.Hosts {
		if h.State == "adopted" && h.AdoptedBy != live {
			t.Errorf("status: %s adopted by %s, want %s (the only live host)", h.Host, h.AdoptedBy, live)
		}
	}

	// b was removed for good: once its adoption is finished, the operator
	// forgets it, and the host-lost alert's series goes. A live host is
	// refused.
	if out, err := in.forgetHost(t, live); err == nil || !strings.Contains(out, "is live") {
		t.Errorf("forget-host of the live host %s: %v\n%s", live, err, out)
	}
	if !testwait.Until(60*time.Second, func() bool {
		for _, h := range in.statusJSON(t, a).Cluster.Hosts {
			if h.Host == adopted {
				return h.Finished
			}
		}
		return false
	}) {
		t.Fatalf("status never showed %s's adoption finished", adopted)
	}
	if out, err := in.forgetHost(t, adopted); err != nil {
		t.Fatalf("forget-host %s: %v\n%s", adopted, err, out)
	}
	a.waitMetrics(t, "b forgotten", func(m e2eproc.Metrics) bool {
		return m.Get("ticketrelay_cluster_hosts", "state", "adopted") == 0 && m.Get("ticketrelay_cluster_hosts", "state", "live") == 1 &&
			m.Get("ticketrelay_cluster_host_lost") == 0
	})
	for _, h := range in.statusJSON(t, a).Cluster.Hosts {
		if h.Host == adopted {
			t.Errorf("status still lists %s after forget-host: %+v", adopted, h)
		}
	}

	// A node that leads neither the stream nor the bucket is lost: one
	// replica of each falls behind, the leaders stay (so every question
	// is still answered at once).
	if streamLeader, err = in.cluster.StreamLeader(ctx, "ticketrelay-"+installationName); err != nil {
		t.Fatal(err)
	}
	if bucketLeader, err = in.cluster.KVLeader(ctx, "ticketrelay-"+installationName+"-requests"); err != nil {
		t.Fatal(err)
	}
	other := 0
	for other == streamLeader || other == bucketLeader {
		other++
	}
	if err := in.cluster.Kill(other); err != nil {
		t.Fatal(err)
	}
	a.waitMetrics(t, "a replica of the stream and of the bucket behind", func(m e2eproc.Metrics) bool {
		for _, res := range []string{"stream", "bucket"} {
			if m.Get("ticketrelay_cluster_replicas", "resource", res, "state", "lagging")+
				m.Get("ticketrelay_cluster_replicas", "resource", res, "state", "offline") != 1 ||
				m.Get("ticketrelay_cluster_replicas", "resource", res, "state", "current") != 2 ||
				m.Get("ticketrelay_cluster_leader_known", "resource", res) != 1 {
				return false
			}
		}
		return m.Get("ticketrelay_cluster_record_available") == 1
	})
	text, err = in.status(t, a)
	if err != nil {
		t.Fatalf("status with one node lost: %v\n%s", err, text)
	}
	if !strings.Contains(text, in.cluster.Name(other)+" (not current") && !strings.Contains(text, in.cluster.Name(other)+" (offline)") {
		t.Errorf("status does not show %s behind:\n%s", in.cluster.Name(other), text)
	}

	if testing.Short() {
		return
	}
	// A second node: no quorum. The metrics say so and status fails.
	if err := in.cluster.Kill(bucketLeader); err != nil {
		t.Fatal(err)
	}
	a.waitMetrics(t, "the quorum lost", func(m e2eproc.Metrics) bool {
		return m.Get("ticketrelay_cluster_record_available") == 0 ||
			m["ticketrelay_cluster_leader_known"] != nil && m.Get("ticketrelay_cluster_leader_known", "resource", "bucket") == 0
	})
	text, err = in.status(t, a)
	if err == nil {
		t.Errorf("status without a quorum exits 0:\n%s", text)
	}
	if !strings.Contains(text, "did not answer") && !strings.Contains(text, "NONE (no quorum") {
		t.Errorf("status without a quorum does not say so:\n%s", text)
	}
}
