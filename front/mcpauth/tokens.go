package mcpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// MinTokenLen is the shortest bearer token accepted in configuration.
const MinTokenLen = 16

// Tokens is a set of static bearer tokens, each naming the subject it
// authenticates. An MCP session is bound to the subject that opened it. Tokens
// are kept only as SHA-256 sums and never printed.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	subject string
	sum     [sha256.Size]byte
}

var (
	// RFC 6750 b64token: the characters a bearer token may have.
	tokenRE   = regexp.MustCompile(`^[A-Za-z0-9\-._~+/]+=*$`)
	subjectRE = regexp.MustCompile(`^[A-Za-z0-9._@\-]{1,64}$`)
)

// ParseTokens reads tokens from text: entries separated by newlines or
// commas, each "subject:token" or a bare token (its subject is then
// "token-" and the first 8 hex digits of its SHA-256). Blank entries and
// lines starting with # are skipped. A token has at least MinTokenLen
// characters of RFC 6750's b64token alphabet. Errors name the entry by
// number, never by content. source names where the text came from.
func ParseTokens(source, text string) (*Tokens, error) {
	t := &Tokens{}
	return t, t.add(source, text)
}

// Merge adds the tokens of o to t.
func (t *Tokens) Merge(o *Tokens) error {
	for _, e := range o.entries {
		if err := t.insert(e); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tokens) add(source, text string) error {
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for entry := range strings.SplitSeq(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			subject, token, found := strings.Cut(entry, ":")
			if !found {
				token, subject = subject, ""
			}
			if len(token) < MinTokenLen || !tokenRE.MatchString(token) {
				return fmt.Errorf("%s: token %d: want at least %d characters of A-Z a-z 0-9 - . _ ~ + / (then = padding)", source, n, MinTokenLen)
			}
			sum := sha256.Sum256([]byte(token))
			if subject == "" {
				subject = "token-" + hex.EncodeToString(sum[:4])
			}
			if !subjectRE.MatchString(subject) {
				return fmt.Errorf("%s: token %d: the subject must be 1-64 characters of A-Z a-z 0-9 . _ @ -", source, n)
			}
			if err := t.insert(tokenEntry{subject: subject, sum: sum}); err != nil {
				return fmt.Errorf("%s: token %d: %w", source, n, err)
			}
		}
	}
	return nil
}

func (t *Tokens) insert(e tokenEntry) error {
	for _, o := range t.entries {
		if o.sum == e.sum {
			return errors.New("the same token is listed twice")
		}
	}
	t.entries = append(t.entries, e)
	return nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Subjects lists the subjects, for a startup log line.
func (t *Tokens) Subjects() []string {
	out := make([]string, 0, t.Len())
	for _, e := range t.entries {
		out = append(out, e.subject)
	}
	return out
}

// Verify returns the subject of token. It compares the token's SHA-256 with
// every configured sum in constant time and does not stop at a match, so the
// time taken says nothing about which token, or which prefix, matched.
func (t *Tokens) Verify(token string) (subject string, ok bool) {
	if t == nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			subject, ok = e.subject, true
		}
	}
	return subject, ok
}

// String never shows a token.
func (t *Tokens) String() string { return fmt.Sprintf("%d bearer token(s)", t.Len()) }

// LogValue keeps tokens out of structured logs.
func (t *Tokens) LogValue() slog.Value { return slog.StringValue(t.String()) }
