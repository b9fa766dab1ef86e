// Command riverbaseline is the backlog scenario's baseline (`make bench`,
// scenario 8): River, a job queue on the application's database, doing
// ticketrelay's job on SQLite. A backlog of jobs, each a ticket, is inserted
// first (the tickets the agents filed), then River's workers POST each job
// to the webhook receiver (bench/receiver) with the ticket's key as
// Idempotency-Key, as ticketrelay's webhook target does. It is a module of
// its own so that River and its dependencies stay out of ticketrelay's; it
// is a benchmark baseline, not part of ticketrelay.
//
//	riverbaseline insert -db FILE -n 50000
//	riverbaseline work -db FILE -url http://127.0.0.1:PORT/hook -workers 100 -addr-file F
//
// insert migrates the file and inserts the jobs in one transaction; work
// runs a River client until SIGINT or SIGTERM, then stops it gracefully.
// River runs with its documented SQLite settings: one connection
// (SetMaxOpenConns(1)) and WAL; synchronous stays SQLite's default (FULL),
// as the ledger's is.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// TicketArgs is one job: a ticket as an agent filed it.
type TicketArgs struct {
	RequestID string    `json:"request_id"`
	Title     string    `json:"title"`
	Body      string    `json:"body"`
	Priority  string    `json:"priority"`
	Labels    []string  `json:"labels"`
	CreatedAt time.Time `json:"created_at"`
}

// Kind implements river.JobArgs.
func (TicketArgs) Kind() string { return "deliver_ticket" }

// sampleBody is the same ~300-byte body the benchmark's ledger prefill gives
// every ticket.
const sampleBody = "The nightly export job failed on worker-3 with `context deadline exceeded` " +
	"after 30 minutes.\n\nSteps seen:\n1. export started 02:00 UTC\n2. upstream API answered 503 three times\n" +
	"3. job gave up at 02:31 UTC\n\nImpact: the morning dashboard shows yesterday's numbers. " +
	"Logs: see run 4711."

// payload is the body posted for a job: the shape of ticketrelay's webhook
// payload (Standard Webhooks' envelope around the ticket).
type payload struct {
	Type      string     `json:"type"`
	Timestamp time.Time  `json:"timestamp"`
	Data      TicketArgs `json:"data"`
}

// DeliverWorker posts a job's ticket to the receiver.
type DeliverWorker struct {
	river.WorkerDefaults[TicketArgs]
	url    string
	client *http.Client
}

// Work implements river.Worker: a non-2xx answer is an error, which River
// retries later.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[TicketArgs]) error {
	body, err := json.Marshal(payload{Type: "ticket.created", Timestamp: job.Args.CreatedAt, Data: job.Args})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", job.Args.RequestID)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: riverbaseline insert|work [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	switch os.Args[1] {
	case "insert":
		err = insert(ctx, os.Args[2:], log)
	case "work":
		err = work(ctx, os.Args[2:], log)
	default:
		err = fmt.Errorf("unknown command %q (insert or work)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "riverbaseline: %v\n", err)
		os.Exit(1)
	}
}

// openDB opens the River database as riversqlite's documentation advises.
func openDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	// River runs concurrent operations that SQLite would answer with
	// SQLITE_BUSY: riversqlite's documented workaround is one connection.
	db.SetMaxOpenConns(1)
	return db, nil
}

func insert(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("insert", flag.ContinueOnError)
	path := fs.String("db", "", "SQLite database `file` (created)")
	n := fs.Int("n", 50_000, "jobs to insert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || *n < 1 {
		return errors.New("insert: -db and a positive -n are required")
	}
	start := time.Now()
	db, err := openDB(*path)
	if err != nil {
		return err
	}
	defer db.Close()
	drv := riversqlite.New(db)
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: log})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	client, err := river.NewClient(drv, &river.Config{Logger: log}) // insert-only: no queues
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, *n)
	labels := []string{"export", "nightly"}
	created := time.Now().UTC()
	rid := make([]byte, 18)
	for i := range params {
		rand.Read(rid)
		params[i].Args = TicketArgs{RequestID: hex.EncodeToString(rid), Title: fmt.Sprintf("Nightly export failed (prefilled %d)", i),
			Body: sampleBody, Priority: "normal", Labels: labels, CreatedAt: created}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	count, err := client.InsertManyFastTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "riverbaseline: %d jobs inserted in %s\n", count, time.Since(start).Round(time.Millisecond))
	return db.Close()
}

func work(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	path := fs.String("db", "", "SQLite database `file` made by insert")
	url := fs.String("url", "", "receiver `URL` to POST each job to")
	workers := fs.Int("workers", 100, "River's MaxWorkers for the queue (and HTTP connections kept to the receiver)")
	cooldown := fs.Duration("fetch-cooldown", 0, "River's FetchCooldown (0: River's default)")
	addrFile := fs.String("addr-file", "", "write {\"started\": time} to this `file` once the client has started")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || *url == "" || *workers < 1 {
		return errors.New("work: -db, -url and a positive -workers are required")
	}
	db, err := openDB(*path)
	if err != nil {
		return err
	}
	defer db.Close()
	// One pooled connection per worker, as ticketrelay's targets keep: the
	// comparison is of the queues, not of connection reuse (Go's default
	// transport keeps 2 idle connections per host).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = *workers, *workers
	workersReg := river.NewWorkers()
	river.AddWorker(workersReg, &DeliverWorker{url: *url, client: &http.Client{Transport: tr, Timeout: 20 * time.Second}})
	client, err := river.NewClient(riversqlite.New(db), &river.Config{
		Logger:        log,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers:       workersReg,
		FetchCooldown: *cooldown,
	})
	if err != nil {
		return err
	}
	// Not ctx: River stops and cancels the jobs in flight when the context
	// given to Start ends; a signal stops it gracefully below.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if *addrFile != "" {
		b, _ := json.Marshal(map[string]string{"started": time.Now().UTC().Format(time.RFC3339Nano)})
		if err := os.WriteFile(*addrFile+".tmp", b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
			return err
		}
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}
