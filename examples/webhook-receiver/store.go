package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// record is one line of tickets.jsonl: a ticket, the key it came with and
// the digest of the body, so that after a restart a resend is told from
// the same key with another body.
type record struct {
	ID         string    `json:"id"`
	Key        string    `json:"key"`
	Digest     string    `json:"digest"` // hex SHA-256 of the request body
	ReceivedAt time.Time `json:"received_at"`
	Ticket     Ticket    `json:"ticket"`

	digest [32]byte
}

// store keeps the tickets in a file of JSON lines, each written and synced
// before the answer that names it, and in memory for GET /tickets/{id}.
type store struct {
	mu   sync.Mutex
	f    *os.File
	path string
	out  io.Writer // each new ticket, as a JSON line
	next int
	byID map[string]record
}

// openStore reads the tickets kept in path (made if missing) and returns
// them in the order they were created. A last line cut short by a crash was
// never answered: it is dropped.
func openStore(path string, out io.Writer) (*store, []record, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("tickets file: %w", err)
	}
	s := &store{f: f, path: path, out: out, byID: map[string]record{}}
	kept, err := s.read()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return s, kept, nil
}

func (s *store) read() ([]record, error) {
	var kept []record
	br := bufio.NewReader(s.f)
	var good int64 // bytes of whole lines
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 { // cut short: never answered
				if err := s.f.Truncate(good); err != nil {
					return nil, fmt.Errorf("%s: dropping a partial last line: %w", s.path, err)
				}
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", s.path, n, err)
		}
		d, err := hex.DecodeString(r.Digest)
		num, ok := strings.CutPrefix(r.ID, "T-")
		seq, nerr := strconv.Atoi(num)
		if err != nil || len(d) != len(r.digest) || r.Key == "" || !ok || nerr != nil {
			return nil, fmt.Errorf("%s:%d: not a ticket this receiver wrote (id, key and digest)", s.path, n)
		}
		copy(r.digest[:], d)
		s.next = max(s.next, seq)
		s.byID[r.ID] = r
		kept = append(kept, r)
		good += int64(len(line))
	}
	if _, err := s.f.Seek(good, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	return kept, nil
}

// Create appends a ticket and syncs it, then prints it; it returns its id.
func (s *store) Create(key string, digest [32]byte, p Payload) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := record{ID: "T-" + strconv.Itoa(s.next+1), Key: key, Digest: hex.EncodeToString(digest[:]), ReceivedAt: time.Now().UTC(), Ticket: p.Data, digest: digest}
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	if _, err := s.f.Write(append(b, '\n')); err != nil {
		return "", fmt.Errorf("%s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return "", fmt.Errorf("%s: %w", s.path, err)
	}
	s.next++
	s.byID[r.ID] = r
	fmt.Fprintf(s.out, "%s\n", b)
	return r.ID, nil
}

// ServeTicket answers GET /tickets/{id}: the ticket's external_url.
func (s *store) ServeTicket(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	r, ok := s.byID[req.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		problem(w, http.StatusNotFound, "no ticket "+req.PathValue("id"))
		return
	}
	b, _ := json.Marshal(r)
	reply(w, http.StatusOK, b)
}

func (s *store) Close() error { return s.f.Close() }

// loadSecret returns the signing secret kept in path, making it on the
// first start: from env (WEBHOOK_SECRET) when set, else from 32 random
// bytes. A set env that differs from the file is refused: the two sides
// would sign and verify with different secrets.
func loadSecret(path, env string) (secret string, made bool, err error) {
	env = strings.TrimSpace(env)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		secret = string(bytes.TrimSpace(b))
		if env != "" && env != secret {
			return "", false, fmt.Errorf("WEBHOOK_SECRET differs from the secret in %s, which this receiver uses: unset it, "+
				`and give the dispatcher WEBHOOK_SECRET="$(cat %s)"`, path, path)
		}
		return secret, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("signing secret: %w", err)
	}
	secret = env
	if secret != "" {
		if _, err := signingKey(secret); err != nil {
			return "", false, fmt.Errorf("WEBHOOK_SECRET: %w", err)
		}
	} else {
		key := make([]byte, 32)
		rand.Read(key)
		secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("signing secret: %w", err)
	}
	_, err = f.WriteString(secret + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", false, fmt.Errorf("signing secret: %w", err)
	}
	return secret, true, nil
}
