package ticket_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"ticketrelay/ticket"
)

// valid returns a request that passes Normalize; tests change one field.
func valid() ticket.Request {
	return ticket.Request{
		RequestID: "0b6f3c9e-1d2a-4c1e-9a55-6b1f0e8c2d11",
		Tool:      "create_ticket",
		Target:    "local",
		Title:     "Checkout fails with 500",
		Body:      "Steps:\n\t1. add to cart\r\n\t2. pay",
		Priority:  "high",
		Labels:    []string{"payments", "bug"},
	}
}

func TestNormalizeRejects(t *testing.T) {
	labels := func(n int) []string {
		ls := make([]string, n)
		for i := range ls {
			ls[i] = "l" + strings.Repeat("x", i)
		}
		return ls
	}
	tests := []struct {
		name   string
		edit   func(r *ticket.Request)
		arg    string // InvalidError.Argument
		reason string // substring of InvalidError.Reason
	}{
		{"empty request_id", func(r *ticket.Request) { r.RequestID = "" }, "request_id", "is required"},
		{"request_id 256 bytes", func(r *ticket.Request) { r.RequestID = strings.Repeat("a", 256) }, "request_id", "256 bytes"},
		{"request_id with space", func(r *ticket.Request) { r.RequestID = "abc def" }, "request_id", "byte 0x20 at offset 3"},
		{"request_id with tab", func(r *ticket.Request) { r.RequestID = "abc\tdef" }, "request_id", "byte 0x09"},
		{"request_id with NUL", func(r *ticket.Request) { r.RequestID = "\x00abc" }, "request_id", "byte 0x00 at offset 0"},
		{"request_id with DEL", func(r *ticket.Request) { r.RequestID = "abc\x7f" }, "request_id", "byte 0x7f"},
		{"request_id non-ASCII", func(r *ticket.Request) { r.RequestID = "café" }, "request_id", "byte 0xc3 at offset 3"},
		{"empty title", func(r *ticket.Request) { r.Title = "" }, "title", "is required"},
		{"whitespace title", func(r *ticket.Request) { r.Title = "   " }, "title", "is required"},
		{"no-break-space title", func(r *ticket.Request) { r.Title = "\u00a0\u2003" }, "title", "is required"},
		{"title 513 characters", func(r *ticket.Request) { r.Title = strings.Repeat("x", 513) }, "title", "513 characters"},
		{"title 513 two-byte characters", func(r *ticket.Request) { r.Title = strings.Repeat("é", 513) }, "title", "513 characters"},
		{"title with newline", func(r *ticket.Request) { r.Title = "two\nlines" }, "title", "control character U+000A at byte 3"},
		{"title with tab", func(r *ticket.Request) { r.Title = "a\tb" }, "title", "U+0009"},
		{"title with escape", func(r *ticket.Request) { r.Title = "a\x1b[31mred" }, "title", "U+001B"},
		{"title with C1 control", func(r *ticket.Request) { r.Title = "a\u0085b" }, "title", "U+0085"},
		{"title invalid UTF-8", func(r *ticket.Request) { r.Title = "bad \xff byte" }, "title", "not valid UTF-8"},
		{"title truncated UTF-8", func(r *ticket.Request) { r.Title = "cut \xc3" }, "title", "not valid UTF-8"},
		{"title U+FFFD", func(r *ticket.Request) { r.Title = "lost \ufffd char" }, "title", "U+FFFD at byte 5"},
		{"body 64 KiB + 1", func(r *ticket.Request) { r.Body = strings.Repeat("b", 64*1024+1) }, "body", "65537 bytes"},
		{"body invalid UTF-8", func(r *ticket.Request) { r.Body = "\xc0\xaf" }, "body", "not valid UTF-8"},
		{"body U+FFFD", func(r *ticket.Request) { r.Body = "x\ufffd" }, "body", "U+FFFD at byte 1"},
		{"body with NUL", func(r *ticket.Request) { r.Body = "a\x00b" }, "body", "U+0000"},
		{"body with bell", func(r *ticket.Request) { r.Body = "line\n\x07" }, "body", "U+0007 at byte 5"},
		{"unknown priority", func(r *ticket.Request) { r.Priority = "critical" }, "priority", `"critical"`},
		{"priority wrong case", func(r *ticket.Request) { r.Priority = "High" }, "priority", `"High"`},
		{"21 labels", func(r *ticket.Request) { r.Labels = labels(21) }, "labels", "21 entries"},
		{"21 labels even with duplicates", func(r *ticket.Request) { r.Labels = slices.Repeat([]string{"a"}, 21) }, "labels", "21 entries"},
		{"empty label", func(r *ticket.Request) { r.Labels = []string{"a", ""} }, "labels", "empty label"},
		{"blank label", func(r *ticket.Request) { r.Labels = []string{" \t "} }, "labels", "empty label"},
		{"label 65 characters", func(r *ticket.Request) { r.Labels = []string{strings.Repeat("é", 65)} }, "labels", "65 characters"},
		{"label with newline", func(r *ticket.Request) { r.Labels = []string{"a\nb"} }, "labels", "U+000A"},
		{"label invalid UTF-8", func(r *ticket.Request) { r.Labels = []string{"\xff"} }, "labels", "not valid UTF-8"},
		// Invisible format characters that change how a title reads.
		{"title with RLO", func(r *ticket.Request) { r.Title = "invoice \u202efdp.exe" }, "title", "invisible format character U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 8"},
		{"title with LRE", func(r *ticket.Request) { r.Title = "a\u202ab" }, "title", "U+202A (LEFT-TO-RIGHT EMBEDDING)"},
		{"title with PDF", func(r *ticket.Request) { r.Title = "a\u202cb" }, "title", "U+202C"},
		{"title with RLI", func(r *ticket.Request) { r.Title = "a\u2067b" }, "title", "U+2067 (RIGHT-TO-LEFT ISOLATE)"},
		{"title with PDI", func(r *ticket.Request) { r.Title = "a\u2069b" }, "title", "U+2069"},
		{"title with LRM", func(r *ticket.Request) { r.Title = "a\u200eb" }, "title", "U+200E (LEFT-TO-RIGHT MARK)"},
		{"title with RLM", func(r *ticket.Request) { r.Title = "a\u200fb" }, "title", "U+200F"},
		{"title with ALM", func(r *ticket.Request) { r.Title = "a\u061cb" }, "title", "U+061C (ARABIC LETTER MARK)"},
		{"title with zero width space", func(r *ticket.Request) { r.Title = "pay\u200bpal" }, "title", "U+200B"},
		{"title with BOM", func(r *ticket.Request) { r.Title = "\ufeffhello" }, "title", "U+FEFF"},
		{"title with soft hyphen", func(r *ticket.Request) { r.Title = "pass\u00adword" }, "title", "U+00AD"},
		{"title with invisible times", func(r *ticket.Request) { r.Title = "a\u2062b" }, "title", "U+2062"},
		{"title with interlinear annotation", func(r *ticket.Request) { r.Title = "a\ufff9hidden\ufffbb" }, "title", "U+FFF9"},
		{"title with tag characters", func(r *ticket.Request) { r.Title = "ok\U000E0069\U000E0067\U000E006E" }, "title", "tag character U+E0069 at byte 2 outside an emoji flag"},
		{"title with tags after a flag's end", func(r *ticket.Request) {
			r.Title = "\U0001F3F4\U000E0067\U000E0062\U000E007F\U000E0041"
		}, "title", "tag character U+E0041"},
		{"label with RLO", func(r *ticket.Request) { r.Labels = []string{"ok", "\u202egub"} }, "labels", "U+202E"},
		{"label with LRI", func(r *ticket.Request) { r.Labels = []string{"a\u2066b"} }, "labels", "U+2066"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.edit(&r)
			err := r.Normalize()
			if err == nil {
				t.Fatalf("Normalize accepted %+v", r)
			}
			if !errors.Is(err, ticket.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var ie *ticket.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %T %v is not *InvalidError", err, err)
			}
			if ie.Argument != tt.arg {
				t.Errorf("Argument = %q, want %q (err %v)", ie.Argument, tt.arg, err)
			}
			if !strings.Contains(ie.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to contain %q", ie.Reason, tt.reason)
			}
			if !strings.Contains(err.Error(), `"`+tt.arg+`"`) {
				t.Errorf("Error() = %q does not name the argument", err.Error())
			}
		})
	}
}

func TestNormalizeAccepts(t *testing.T) {
	tests := []struct {
		name string
		edit func(r *ticket.Request)
		want func(t *testing.T, r ticket.Request)
	}{
		{"default priority", func(r *ticket.Request) { r.Priority = "" }, func(t *testing.T, r ticket.Request) {
			if r.Priority != "normal" {
				t.Errorf("Priority = %q, want normal", r.Priority)
			}
		}},
		{"labels trimmed, deduplicated and sorted", func(r *ticket.Request) {
			r.Labels = []string{" zeta", "alpha ", "zeta", "mid", "alpha", "\talpha"}
		}, func(t *testing.T, r ticket.Request) {
			if want := []string{"alpha", "mid", "zeta"}; !slices.Equal(r.Labels, want) {
				t.Errorf("Labels = %q, want %q", r.Labels, want)
			}
		}},
		{"no labels becomes nil", func(r *ticket.Request) { r.Labels = []string{} }, func(t *testing.T, r ticket.Request) {
			if r.Labels != nil {
				t.Errorf("Labels = %#v, want nil", r.Labels)
			}
		}},
		{"20 labels", func(r *ticket.Request) {
			r.Labels = nil
			for i := range 20 {
				r.Labels = append(r.Labels, strings.Repeat("l", i+1))
			}
		}, func(t *testing.T, r ticket.Request) {
			if len(r.Labels) != 20 {
				t.Errorf("%d labels, want 20", len(r.Labels))
			}
		}},
		{"label of 64 characters", func(r *ticket.Request) { r.Labels = []string{strings.Repeat("é", 64)} }, nil},
		// Format characters that reorder and hide nothing pass: joiners in
		// emoji and scripts, the signs over digits, an emoji flag's tags;
		// and anything in a body, which is free text.
		{"title with an emoji ZWJ sequence", func(r *ticket.Request) { r.Title = "\U0001F469\u200d\U0001F4BB build broke" }, nil},
		{"title with ZWNJ in Persian", func(r *ticket.Request) { r.Title = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645" }, nil},
		{"title with a subdivision flag", func(r *ticket.Request) {
			r.Title = "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F office"
		}, nil},
		{"title with an Arabic number sign", func(r *ticket.Request) { r.Title = "\u0600123" }, nil},
		{"label with an emoji ZWJ sequence", func(r *ticket.Request) { r.Labels = []string{"\U0001F3F3\ufe0f\u200d\U0001F308"} }, nil},
		{"body with bidi controls, marks and tags", func(r *ticket.Request) {
			r.Body = "\ufeffshalom \u05e9\u05dc\u05d5\u05dd\u200e (v2)\n\u202eevil\u202c \u2067x\u2069 \U000E0041"
		}, nil},
		{"request_id of 255 visible ASCII", func(r *ticket.Request) {
			b := make([]byte, 0, 255)
			for i := range 255 {
				b = append(b, byte(0x21+i%94))
			}
			r.RequestID = string(b)
		}, nil},
		{"title of 512 characters (1024 bytes)", func(r *ticket.Request) { r.Title = strings.Repeat("é", 512) }, nil},
		{"title with surrounding spaces kept", func(r *ticket.Request) { r.Title = "  padded  " }, func(t *testing.T, r ticket.Request) {
			if r.Title != "  padded  " {
				t.Errorf("Title = %q, changed", r.Title)
			}
		}},
		{"body of exactly 64 KiB", func(r *ticket.Request) { r.Body = strings.Repeat("b", 64*1024) }, nil},
		{"empty body", func(r *ticket.Request) { r.Body = "" }, nil},
		{"body with newline, CR and tab", func(r *ticket.Request) { r.Body = "a\nb\r\nc\td" }, nil},
		{"non-ASCII text", func(r *ticket.Request) { r.Title = "Zahlung schlägt fehl 💳"; r.Body = "日本語" }, nil},
	}
	for _, p := range ticket.Priorities {
		tests = append(tests, struct {
			name string
			edit func(r *ticket.Request)
			want func(t *testing.T, r ticket.Request)
		}{"priority " + p, func(r *ticket.Request) { r.Priority = p }, func(t *testing.T, r ticket.Request) {
			if r.Priority != p {
				t.Errorf("Priority = %q, want %q", r.Priority, p)
			}
		}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.edit(&r)
			if err := r.Normalize(); err != nil {
				t.Fatalf("Normalize: %v", err)
			}
			if tt.want != nil {
				tt.want(t, r)
			}
		})
	}
}

// hashOf normalizes r and returns its hash.
func hashOf(t *testing.T, r ticket.Request) string {
	t.Helper()
	if err := r.Normalize(); err != nil {
		t.Fatalf("Normalize(%+v): %v", r, err)
	}
	return r.Hash()
}

func TestHash(t *testing.T) {
	base := valid()
	if err := base.Normalize(); err != nil {
		t.Fatal(err)
	}
	h := base.Hash()
	if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("Hash = %q, want 64 lowercase hex digits", h)
	}
	if again := base.Hash(); again != h {
		t.Fatalf("Hash not deterministic: %s then %s", h, again)
	}

	same := map[string]func(r *ticket.Request){
		"reordered labels":         func(r *ticket.Request) { r.Labels = []string{"bug", "payments"} },
		"duplicated labels":        func(r *ticket.Request) { r.Labels = []string{"payments", "bug", "bug", " payments "} },
		"other request_id":         func(r *ticket.Request) { r.RequestID = "another-id" },
		"priority left to default": nil, // checked separately below
	}
	for name, edit := range same {
		if edit == nil {
			continue
		}
		r := valid()
		edit(&r)
		if got := hashOf(t, r); got != h {
			t.Errorf("%s: Hash = %s, want %s", name, got, h)
		}
	}
	def := valid()
	def.Priority = ""
	explicit := valid()
	explicit.Priority = "normal"
	if a, b := hashOf(t, def), hashOf(t, explicit); a != b {
		t.Errorf("default priority hashes %s, explicit normal %s", a, b)
	}

	differ := map[string]func(r *ticket.Request){
		"tool":           func(r *ticket.Request) { r.Tool = "create_ticket_jira" },
		"target":         func(r *ticket.Request) { r.Target = "jira" },
		"title":          func(r *ticket.Request) { r.Title += "!" },
		"title spacing":  func(r *ticket.Request) { r.Title = " " + r.Title },
		"body":           func(r *ticket.Request) { r.Body += "." },
		"priority":       func(r *ticket.Request) { r.Priority = "urgent" },
		"one label more": func(r *ticket.Request) { r.Labels = append(r.Labels, "x") },
		"one label less": func(r *ticket.Request) { r.Labels = r.Labels[:1] },
		"no labels":      func(r *ticket.Request) { r.Labels = nil },
		"label changed":  func(r *ticket.Request) { r.Labels = []string{"payments", "bugs"} },
		"text moved":     func(r *ticket.Request) { r.Title, r.Body = r.Title+"x", r.Body[1:] },
		"labels joined":  func(r *ticket.Request) { r.Labels = []string{"bug,payments"} },
	}
	seen := map[string]string{h: "base"}
	for name, edit := range differ {
		r := valid()
		edit(&r)
		got := hashOf(t, r)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: Hash %s equals that of %s", name, got, prev)
		}
		seen[got] = name
	}
}

func TestIDFor(t *testing.T) {
	id := ticket.IDFor("req-1")
	if id != ticket.IDFor("req-1") {
		t.Fatal("IDFor is not deterministic")
	}
	if !strings.HasPrefix(id, "tkt_") {
		t.Fatalf("IDFor = %q, want prefix tkt_", id)
	}
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	if rest := id[len("tkt_"):]; len(rest) != 21 || strings.Trim(rest, alphabet) != "" {
		t.Fatalf("IDFor = %q, want tkt_ + 21 Crockford base32 characters", id)
	}
	seen := map[string]string{}
	for i := range 20000 {
		rid := "req-" + strings.Repeat("z", i%7) + string(rune('a'+i%26)) + itoa(i)
		got := ticket.IDFor(rid)
		if prev, dup := seen[got]; dup {
			t.Fatalf("IDFor(%q) = IDFor(%q) = %s", rid, prev, got)
		}
		seen[got] = rid
	}
	if ticket.IDFor("a") == ticket.IDFor("A") || ticket.IDFor("") == ticket.IDFor(" ") {
		t.Fatal("IDFor collides on near-identical ids")
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// FuzzNormalize checks that Normalize never panics and that whatever it
// accepts is within the documented limits and a fixed point.
func FuzzNormalize(f *testing.F) {
	v := valid()
	f.Add(v.RequestID, v.Title, v.Body, v.Priority, strings.Join(v.Labels, "\n"))
	f.Add("", "", "", "", "")
	f.Add("id", "   ", "", "low", "")
	f.Add("id", "t", "", "", " b\na\nb\n a")
	f.Add("id with space", "t", "", "", "")
	f.Add("café", "t", "", "", "")
	f.Add("id", strings.Repeat("é", 513), "", "", "")
	f.Add("id", "t", strings.Repeat("b", 64*1024+1), "", "")
	f.Add("id", "bad \xff", "", "", "")
	f.Add("id", "t", "\ufffd", "", "")
	f.Add("id", "a\nb", "a\nb\tc", "", "")
	f.Add("id", "t", "", "critical", "")
	f.Add("id", "t", "", "", strings.Repeat("x\n", 21))
	f.Add("id", "t", "", "", "a\n\nb")
	f.Add("id", "\u00a0", "\x00", "normal", "\u00a0x\u00a0")
	f.Fuzz(func(t *testing.T, id, title, body, priority, labels string) {
		r := ticket.Request{RequestID: id, Tool: "create_ticket", Target: "local", Title: title, Body: body, Priority: priority}
		if labels != "" {
			r.Labels = strings.Split(labels, "\n")
		}
		if err := r.Normalize(); err != nil {
			if !errors.Is(err, ticket.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if r.RequestID != id || r.Title != title || r.Body != body {
			t.Fatalf("Normalize changed id, title or body: %+v", r)
		}
		if len(id) < 1 || len(id) > ticket.MaxRequestIDLen {
			t.Fatalf("accepted request_id of %d bytes", len(id))
		}
		for i := 0; i < len(id); i++ {
			if id[i] <= ' ' || id[i] > '~' {
				t.Fatalf("accepted request_id %q with byte 0x%02x", id, id[i])
			}
		}
		for _, s := range append([]string{title, body, r.Priority}, r.Labels...) {
			if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
				t.Fatalf("accepted invalid or replaced UTF-8 %q", s)
			}
		}
		if n := utf8.RuneCountInString(title); n > ticket.MaxTitleLen || strings.TrimSpace(title) == "" {
			t.Fatalf("accepted title of %d characters: %q", n, title)
		}
		if strings.ContainsAny(title, "\n\r\t\x00") {
			t.Fatalf("accepted control characters in title %q", title)
		}
		if len(body) > ticket.MaxBodyLen {
			t.Fatalf("accepted body of %d bytes", len(body))
		}
		if !slices.Contains(ticket.Priorities, r.Priority) || (priority != "" && r.Priority != priority) {
			t.Fatalf("priority %q became %q", priority, r.Priority)
		}
		if len(r.Labels) > ticket.MaxLabels {
			t.Fatalf("accepted %d labels", len(r.Labels))
		}
		for i, l := range r.Labels {
			if l == "" || l != strings.TrimSpace(l) || utf8.RuneCountInString(l) > ticket.MaxLabelLen {
				t.Fatalf("accepted label %q", l)
			}
			if i > 0 && r.Labels[i-1] >= l {
				t.Fatalf("labels not strictly sorted: %q", r.Labels)
			}
		}
		again := r
		again.Labels = slices.Clone(r.Labels)
		if err := again.Normalize(); err != nil {
			t.Fatalf("normalizing a normalized request failed: %v", err)
		}
		if again.Hash() != r.Hash() || !slices.Equal(again.Labels, r.Labels) || again.Priority != r.Priority {
			t.Fatalf("Normalize is not idempotent: %+v then %+v", r, again)
		}
	})
}

// TestGoldenHashAndID pins Hash and IDFor to literal values. Both are
// stored: the ledger keeps each request's hash and compares a retry's hash
// with it, and ticket ids derived by IDFor are in the ledger, in answers
// agents already hold and in the items created downstream. Changing either
// function (or what Normalize makes of a request before Hash) breaks every
// retry that spans an upgrade (the same request_id and arguments become an
// idempotency conflict) and gives an accepted request a different ticket
// id. If this test fails, the change is a data migration, not a refactor.
func TestGoldenHashAndID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      ticket.Request
		hash, id string
	}{
		{
			name: "full request",
			req: ticket.Request{
				RequestID: "0b6f3c9e-1d2a-4c1e-9a55-6b1f0e8c2d11",
				Tool:      "create_ticket",
				Target:    "local",
				Title:     "Checkout fails with 500",
				Body:      "Steps:\n\t1. add to cart\r\n\t2. pay",
				Priority:  "high",
				Labels:    []string{"payments", "bug"},
			},
			hash: "5d6b124216e4a893ce759ad988219ab6562d3de8c1c930a5e5e252edd1c281a9",
			id:   "tkt_3eqbeydbev6dfr1jm2tqj",
		},
		{
			name: "minimal request",
			req:  ticket.Request{RequestID: "req-1", Tool: "create_ticket", Target: "local", Title: "t"},
			hash: "23b35362c5092607d8f15f01fcd0de91229c90dd8c51f518f7e1d963a475ecc4",
			id:   "tkt_jhbbvygjx9v9b74mmdbjy",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			if err := r.Normalize(); err != nil {
				t.Fatal(err)
			}
			if got := r.Hash(); got != tc.hash {
				t.Errorf("Hash = %s, want %s: a stored request's retry would now be a conflict", got, tc.hash)
			}
			if got := ticket.IDFor(r.RequestID); got != tc.id {
				t.Errorf("IDFor(%q) = %s, want %s: accepted requests would change ticket id", r.RequestID, got, tc.id)
			}
		})
	}
}

// The caller is not an argument: the same user's retry from another client
// hashes the same. Clean keeps a name on one line.
func TestCallerOutsideTheHash(t *testing.T) {
	a := ticket.Request{RequestID: "r", Tool: "t", Target: "x", Title: "T", Priority: "normal"}
	b := a
	b.Caller = ticket.Caller{Subject: "s", Name: "Alice", Email: "a@example.com"}
	if a.Hash() != b.Hash() {
		t.Fatal("the caller changed the arguments' hash")
	}
	c := ticket.Caller{Subject: "s", Name: "Al\nice\u202e\x1b[31m", Email: " a@example.com "}.Clean()
	if c.Name != "Alice[31m" || c.Email != "a@example.com" || c.Subject != "s" {
		t.Fatalf("Clean = %+v", c)
	}
}
