// Command receiver is the webhook receiver of the benchmark's backlog
// scenario (`make bench`, scenario 8): the downstream that ticketrelay, the
// River baseline (bench/riverbaseline) and the plain-POST ceiling deliver
// to, one fresh process per run. It answers every POST with 200 (after
// -latency, to stand in for a real API) and keeps every Idempotency-Key it
// was sent in memory, so it can tell when it holds all of them and how many
// requests repeated a key it already had (duplicates). It counts the TCP
// connections its clients opened (http.Server.ConnState), the figure that
// shows whether a sender reuses its connections.
//
// Its counters are served as JSON on a second listener (-stats-listen), so
// that the harness polling them opens no connection on the one it counts.
// It is a benchmark fixture, not part of ticketrelay.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Stats is what GET / on the stats listener answers.
type Stats struct {
	Requests   int64 `json:"requests"`    // POSTs answered 200
	Keys       int64 `json:"keys"`        // distinct Idempotency-Key values held
	Duplicates int64 `json:"duplicates"`  // POSTs whose key was already held
	NoKey      int64 `json:"no_key"`      // POSTs without Idempotency-Key (answered 400)
	NewConns   int64 `json:"new_conns"`   // TCP connections accepted on the hook listener
	OpenConns  int64 `json:"open_conns"`  // of which still open
	MaxOpen    int64 `json:"max_open"`    // most open at once
	FirstAt    int64 `json:"first_at"`    // Unix ns of the first key, 0 before
	ExpectedAt int64 `json:"expected_at"` // Unix ns when the -expect'th distinct key arrived, 0 before
}

type receiver struct {
	latency time.Duration
	expect  int64

	mu    sync.Mutex
	keys  map[string]struct{}
	stats Stats
}

func (s *receiver) hook(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	// Read what was sent, as a real receiver does before it answers.
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		s.mu.Lock()
		s.stats.NoKey++
		s.mu.Unlock()
		http.Error(w, "no Idempotency-Key", http.StatusBadRequest)
		return
	}
	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the sender gave up: nothing is held
		}
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	s.stats.Requests++
	if _, dup := s.keys[key]; dup {
		s.stats.Duplicates++
	} else {
		s.keys[key] = struct{}{}
		s.stats.Keys++
		if s.stats.FirstAt == 0 {
			s.stats.FirstAt = now
		}
		if s.stats.Keys == s.expect {
			s.stats.ExpectedAt = now
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *receiver) connState(_ net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.stats.NewConns++
		s.stats.OpenConns++
		s.stats.MaxOpen = max(s.stats.MaxOpen, s.stats.OpenConns)
	case http.StateClosed, http.StateHijacked:
		s.stats.OpenConns--
	}
}

func (s *receiver) serveStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "webhook `address`: every path takes a POST")
	statsListen := flag.String("stats-listen", "127.0.0.1:0", "`address` serving the counters as JSON")
	latency := flag.Duration("latency", 0, "wait this long before answering each POST")
	expect := flag.Int64("expect", 0, "record the time the `n`th distinct key arrives (expected_at)")
	addrFile := flag.String("addr-file", "", "write the listening addresses (hook, stats) as JSON to this `file`")
	flag.Parse()
	if err := run(*listen, *statsListen, *addrFile, *latency, *expect); err != nil {
		log.Fatal(err)
	}
}

func run(listen, statsListen, addrFile string, latency time.Duration, expect int64) error {
	s := &receiver{latency: latency, expect: expect, keys: make(map[string]struct{}, max(expect, 1024))}
	hl, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	sl, err := net.Listen("tcp", statsListen)
	if err != nil {
		return err
	}
	hook := &http.Server{Handler: http.HandlerFunc(s.hook), ConnState: s.connState, ReadHeaderTimeout: 10 * time.Second}
	stats := &http.Server{Handler: http.HandlerFunc(s.serveStats), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	for _, x := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{hook, hl}, {stats, sl}} {
		go func() {
			if err := x.srv.Serve(x.ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if addrFile != "" {
		b, _ := json.Marshal(map[string]string{"hook": hl.Addr().String(), "stats": sl.Addr().String()})
		if err := os.WriteFile(addrFile+".tmp", b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "receiver on http://%s/ (latency %s), counters on http://%s/\n", hl.Addr(), latency, sl.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range []*http.Server{hook, stats} {
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}
	return nil
}
