// Command webhook-receiver is a small receiver for ticketrelay's webhook
// target, to start from: it checks each request's Standard Webhooks
// signature, creates each ticket once per Idempotency-Key, however often
// the dispatcher sends it, answers the id and URL the dispatcher records
// as the ticket's external_id and external_url, and serves that URL. The
// contract it keeps is docs/webhook-receiver.md. Standard library only.
//
//	go run ./examples/webhook-receiver                      # keeps its files in data/webhook-receiver
//	WEBHOOK_SECRET="$(cat data/webhook-receiver/secret)" dispatcher -config examples/webhook.yaml
//
// The signing secret is the file DIR/secret: made on the first start, read
// on every later one, so both sides read the same secret however often
// either is started. Tickets are kept in DIR/tickets.jsonl, one JSON line
// each, written before the answer: after a restart a resend still gets the
// first answer and ids go on where they stopped. Each new ticket is also
// printed to stdout as one JSON line; logs go to stderr.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tolerance is how far webhook-timestamp may be from this receiver's clock
// (Standard Webhooks' recommendation): a captured request cannot be
// replayed later.
const Tolerance = 5 * time.Minute

// maxBody bounds a request's body; a ticket is a few kilobytes.
const maxBody = 1 << 20

// Payload is the body the dispatcher sends.
type Payload struct {
	Type      string    `json:"type"` // "ticket.created"
	Timestamp time.Time `json:"timestamp"`
	Data      Ticket    `json:"data"`
}

// Ticket is the payload's data.
type Ticket struct {
	RequestID string    `json:"request_id"`
	Subject   string    `json:"subject,omitempty"`
	Tool      string    `json:"tool"`
	Target    string    `json:"target"`
	Title     string    `json:"title"`
	Body      string    `json:"body"`
	Priority  string    `json:"priority"`
	Labels    []string  `json:"labels,omitempty"`
	TicketID  string    `json:"ticket_id"`
	CreatedAt time.Time `json:"created_at"`
}

// Created is the answer to a ticket created (or created before, for a
// resend): the dispatcher records id as external_id, url as external_url.
type Created struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// Receiver is the HTTP handler.
type Receiver struct {
	key  []byte // nil: requests are not signed (no secret configured)
	now  func() time.Time
	log  *slog.Logger
	base string // URL prefix of a created ticket's url
	// create stores a new ticket under its key and body digest and returns
	// its id.
	create func(key string, digest [32]byte, p Payload) (string, error)

	mu   sync.Mutex
	keys map[string]*outcome // Idempotency-Key → what the first request with it did
}

// outcome is a key's first request: its payload's digest and, once done,
// its answer, which every resend gets again.
type outcome struct {
	digest [32]byte
	done   bool
	status int
	answer []byte
}

// NewReceiver builds a receiver. secret is the signing secret ("whsec_" +
// base64, as on the dispatcher's side; "" accepts unsigned requests),
// base prefixes the url of a ticket, create stores a ticket.
func NewReceiver(secret, base string, now func() time.Time, log *slog.Logger, create func(string, [32]byte, Payload) (string, error)) (*Receiver, error) {
	r := &Receiver{now: now, log: log, base: strings.TrimRight(base, "/"), create: create, keys: map[string]*outcome{}}
	if secret != "" {
		key, err := signingKey(secret)
		if err != nil {
			return nil, err
		}
		r.key = key
	}
	return r, nil
}

// signingKey decodes a "whsec_" secret into its HMAC key.
func signingKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(key) < 16 {
		return nil, errors.New(`the signing secret must be "whsec_" followed by the base64 of at least 16 bytes`)
	}
	return key, nil
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		problem(w, http.StatusRequestEntityTooLarge, "the body is over 1 MiB")
		return
	}
	if r.key != nil {
		if why := r.verify(req.Header, body); why != "" {
			// 401: the dispatcher fails the request for good and counts an
			// auth failure; the secrets on both sides must be made equal.
			r.log.Warn("refused: bad signature", "why", why)
			problem(w, http.StatusUnauthorized, "webhook signature: "+why)
			return
		}
	}
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		problem(w, http.StatusBadRequest, "an Idempotency-Key header is required")
		return
	}
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Type != "ticket.created" {
		problem(w, http.StatusBadRequest, "the body is not a ticket.created event")
		return
	}
	digest := sha256.Sum256(body)

	r.mu.Lock()
	if o, ok := r.keys[key]; ok {
		r.mu.Unlock()
		switch {
		case o.digest != digest:
			// The same key with another body is a client's bug: resending
			// cannot fix it (422 fails the request for good).
			problem(w, http.StatusUnprocessableEntity, "Idempotency-Key "+key+" was used with another payload")
		case !o.done:
			// The first request with this key is still being processed:
			// 409 makes the dispatcher resend later, with the same key.
			w.Header().Set("Retry-After", "1")
			problem(w, http.StatusConflict, "a request with Idempotency-Key "+key+" is being processed")
		default:
			r.log.Info("resend answered from the first request", "key", key)
			reply(w, o.status, o.answer)
		}
		return
	}
	o := &outcome{digest: digest}
	r.keys[key] = o
	r.mu.Unlock()

	id, err := r.create(key, digest, p)
	if err != nil {
		// Forget the key: nothing was stored, the resend may create it.
		r.mu.Lock()
		delete(r.keys, key)
		r.mu.Unlock()
		r.log.Error("create failed", "key", key, "err", err)
		problem(w, http.StatusServiceUnavailable, "the ticket could not be stored; send it again")
		return
	}
	r.mu.Lock()
	r.settle(o, id)
	r.mu.Unlock()
	r.log.Info("created", "key", key, "id", id)
	reply(w, o.status, o.answer)
}

// Restore records a ticket created before this process started, as the
// store read it back: a resend of its key gets the first answer again.
func (r *Receiver) Restore(key string, digest [32]byte, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := &outcome{digest: digest}
	r.settle(o, id)
	r.keys[key] = o
}

// settle makes o the answer for a created ticket id. r.mu is held.
func (r *Receiver) settle(o *outcome, id string) {
	o.answer, _ = json.Marshal(Created{ID: id, URL: r.base + "/" + id})
	o.done, o.status = true, http.StatusCreated
}

// verify checks the Standard Webhooks headers against body; it returns why
// they fail, or "".
func (r *Receiver) verify(h http.Header, body []byte) string {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "webhook-id, webhook-timestamp and webhook-signature are required"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "webhook-timestamp is not a number of seconds"
	}
	if d := r.now().Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return "webhook-timestamp is more than 5 minutes away from this receiver's clock"
	}
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	// The header may hold several signatures (a sender rotating its
	// secret), separated by spaces: one that matches is enough.
	for _, s := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
			return ""
		}
	}
	return "no signature matches"
}

func reply(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// problem answers an RFC 9457 problem: the dispatcher records its detail
// as the delivery's last error.
func problem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(b)
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], os.Getenv, os.Stdout, log); err != nil {
		log.Error("webhook-receiver", "err", err)
		os.Exit(1)
	}
}

func run(args []string, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("webhook-receiver", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9000", "`address` to listen on (examples/webhook.yaml's endpoint)")
	dir := fs.String("dir", filepath.Join("data", "webhook-receiver"), "`directory` of the signing secret (secret) and the tickets (tickets.jsonl)")
	unsigned := fs.Bool("unsigned", false, "accept unsigned requests (a target without signing_secret_env); no secret file is made")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: the receiver takes flags only", fs.Args())
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	secret, secretFile := "", filepath.Join(*dir, "secret")
	if !*unsigned {
		var made bool
		var err error
		if secret, made, err = loadSecret(secretFile, getenv("WEBHOOK_SECRET")); err != nil {
			return err
		}
		if made {
			log.Info("made a signing secret: give the dispatcher the same one", "file", secretFile,
				"dispatcher", fmt.Sprintf(`WEBHOOK_SECRET="$(cat %s)"`, secretFile))
		}
	}
	// Bind first: a receiver that cannot listen says so and nothing else.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s (-listen): %w", *listen, err)
	}
	defer ln.Close()
	base := "http://" + ln.Addr().String() + "/tickets"
	st, kept, err := openStore(filepath.Join(*dir, "tickets.jsonl"), stdout)
	if err != nil {
		return err
	}
	defer st.Close()
	rcv, err := NewReceiver(secret, base, time.Now, log, st.Create)
	if err != nil {
		return fmt.Errorf("%s: %w", secretFile, err)
	}
	for _, k := range kept {
		rcv.Restore(k.Key, k.digest, k.ID)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /tickets", rcv)
	mux.HandleFunc("GET /tickets/{id}", st.ServeTicket)
	log.Info("listening", "url", base, "signed", !*unsigned, "tickets", len(kept), "dir", *dir)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
