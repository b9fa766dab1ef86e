package natscluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// probeTimeout bounds one monitoring request: a stopped (SIGSTOP) node
// accepts the TCP connection in the kernel but never answers.
const probeTimeout = 2 * time.Second

// varz is the part of /varz the harness reads.
type varz struct {
	ID      string `json:"server_id"`
	Name    string `json:"server_name"`
	Port    int    `json:"port"`
	Cluster struct {
		Name string `json:"name"`
	} `json:"cluster"`
	JetStream struct {
		Config *struct {
			SyncInterval time.Duration `json:"sync_interval"`
			SyncAlways   bool          `json:"sync_always"`
			StoreDir     string        `json:"store_dir"`
		} `json:"config"`
	} `json:"jetstream"`
}

// routez is the part of /routez the harness reads.
type routez struct {
	Routes []routeInfo `json:"routes"`
}

type routeInfo struct {
	RemoteName string `json:"remote_name"`
}

// jsz is the part of /jsz the harness reads.
type jsz struct {
	Meta *struct {
		Leader string `json:"leader"`
		Size   int    `json:"cluster_size"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Name    string `json:"name"`
		Streams []struct {
			Name    string `json:"name"`
			Cluster *struct {
				Leader   string `json:"leader"`
				Replicas []struct {
					Name    string `json:"name"`
					Current bool   `json:"current"`
					Offline bool   `json:"offline"`
				} `json:"replicas"`
			} `json:"cluster"`
			State struct {
				Msgs     uint64 `json:"messages"`
				LastSeq  uint64 `json:"last_seq"`
				FirstSeq uint64 `json:"first_seq"`
			} `json:"state"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// getJSON GETs http://addr+path into v within probeTimeout. A status other
// than 200 is an error carrying the body (/healthz explains itself there).
func getJSON(ctx context.Context, hc *http.Client, addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s%s: %w", addr, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s%s: %s: %.300s", addr, path, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s%s: %w", addr, path, err)
	}
	return nil
}

// clientServerID is the server_id of the INFO a NATS client port at addr
// sends first.
func clientServerID(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	}
	line, err := bufio.NewReaderSize(conn, 4096).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("INFO from %s: %w", addr, err)
	}
	rest, ok := strings.CutPrefix(line, "INFO ")
	if !ok {
		return "", fmt.Errorf("%s does not speak NATS: %q", addr, line)
	}
	var info struct {
		ID string `json:"server_id"`
	}
	if err := json.Unmarshal([]byte(rest), &info); err != nil {
		return "", fmt.Errorf("INFO from %s: %w", addr, err)
	}
	return info.ID, nil
}
