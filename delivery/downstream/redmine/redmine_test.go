package redmine_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"ticketrelay/delivery/downstream"
	"ticketrelay/delivery/downstream/downstreamtest"
	"ticketrelay/delivery/downstream/redmine"
	"ticketrelay/delivery/downstream/redmine/redminetest"
)

const (
	apiKey = "0123456789abcdef0123456789abcdef01234567"
	field  = 7
)

func newTarget(t *testing.T, base, key string, mod ...func(*redmine.Config)) *redmine.Target {
	t.Helper()
	cfg := redmine.Config{Name: "rm", BaseURL: base, APIKey: downstream.NewSecret(key), Project: "support",
		TrackerID: 3, CustomFieldID: field, PriorityIDs: map[string]int{"low": 1, "normal": 2, "high": 3, "urgent": 99},
		HTTPConfig: downstream.HTTPConfig{HTTP: &http.Client{}}}
	for _, m := range mod {
		m(&cfg)
	}
	tg, err := redmine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func noField(c *redmine.Config) { c.CustomFieldID = 0 }

// keyModes are the two places the key can go: the custom field, or (with
// no field configured) a marker in the subject.
var keyModes = []struct {
	name  string
	field int
	mod   []func(*redmine.Config)
}{{"custom field", field, nil}, {"subject marker", 0, []func(*redmine.Config){noField}}}

func TestConformance(t *testing.T) {
	for _, mode := range keyModes {
		t.Run(mode.name, func(t *testing.T) {
			downstreamtest.Run(t, func(t *testing.T) downstreamtest.Harness {
				f := redminetest.New(t, apiKey, "support", mode.field)
				return downstreamtest.Harness{
					Target:      newTarget(t, f.URL(), apiKey, mode.mod...),
					Faults:      &f.Faults,
					Count:       f.Count,
					BadAuth:     newTarget(t, f.URL(), "revoked", mode.mod...),
					Unreachable: newTarget(t, "http://"+downstreamtest.ClosedAddr(t), apiKey, mode.mod...),
					// "urgent" maps to a priority id this Redmine does not have.
					Invalid:        func(d *downstream.Delivery) { d.Ticket.Priority = "urgent" },
					InvalidMessage: "Priority cannot be blank",
				}
			})
		})
	}
}

func deliver(t *testing.T, tg *redmine.Target, d downstream.Delivery) downstream.Receipt {
	t.Helper()
	r, err := tg.Deliver(context.Background(), d)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	return r
}

func find(t *testing.T, tg *redmine.Target, d downstream.Delivery) (downstream.Receipt, bool) {
	t.Helper()
	r, ok, err := tg.Find(context.Background(), d)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	return r, ok
}

func TestIssueFields(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	tg := newTarget(t, f.URL()+"/", apiKey)
	d := downstreamtest.NewDelivery("req-fields")
	r := deliver(t, tg, d)
	is := f.Issues()[0]
	if is.Custom[field] != d.Key || is.TrackerID != 3 || is.PriorityID != 3 || is.Subject != d.Ticket.Title || is.Project != "support" {
		t.Fatalf("issue %+v; want key %q in field %d, tracker 3, priority 3 (high), the title as subject", is, d.Key, field)
	}
	for _, s := range []string{"It smells of toner.", "priority: high", "labels: facilities, hardware", d.Ticket.ID, d.Key} {
		if !strings.Contains(is.Description, s) {
			t.Errorf("description %q lacks %q", is.Description, s)
		}
	}
	if r.ExternalID != "1" || r.URL != f.URL()+"/issues/1" {
		t.Fatalf("receipt %+v; want issue 1 at %s/issues/1", r, f.URL())
	}
	// A priority with no mapping gets Redmine's default.
	d = downstreamtest.NewDelivery("req-nomap")
	d.Ticket.Priority = "normal"
	deliver(t, newTarget(t, f.URL(), apiKey, func(c *redmine.Config) { c.PriorityIDs = nil }), d)
	if is := f.Issues()[1]; is.PriorityID != redminetest.DefaultPriority {
		t.Fatalf("priority %d, want the default %d", is.PriorityID, redminetest.DefaultPriority)
	}
}

// Request ids may hold any visible ASCII: "|" and a leading "!" or "~"
// mean something in Redmine's short filters. The lookup must find exactly
// the key, and never another key that shares a prefix.
func TestFindExactKey(t *testing.T) {
	for _, mode := range keyModes {
		t.Run(mode.name, func(t *testing.T) {
			f := redminetest.New(t, apiKey, "support", mode.field)
			tg := newTarget(t, f.URL(), apiKey, mode.mod...)
			odd := downstreamtest.NewDelivery("!~a|b*%_&x=y")
			odd.Key = "!~a|b*%_&x=y" // no namespace: the key starts with operators
			prefix := downstreamtest.NewDelivery("!~a")
			prefix.Key = "!~a"
			r := deliver(t, tg, odd)
			if _, ok := find(t, tg, prefix); ok {
				t.Fatalf("Find(%q) found the issue of %q", prefix.Key, odd.Key)
			}
			got, ok := find(t, tg, odd)
			if !ok || got != r {
				t.Fatalf("Find(%q) = %+v, %v; want %+v", odd.Key, got, ok, r)
			}
			f.Close(1)
			if got, ok := find(t, tg, odd); !ok || got != r {
				t.Fatalf("Find of a closed issue = %+v, %v; want %+v", got, ok, r)
			}
		})
	}
}

// A custom field the project does not enable is dropped by Redmine without
// an error: the issue exists, but no lookup could find it. Deliver says so
// (permanent). Redmine then ignores the filter on the field too: Find never
// takes an unrelated issue for the key, and never reports "not found" from
// the unfiltered list either.
func TestDroppedCustomField(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	other := downstreamtest.NewDelivery("req-other")
	deliver(t, newTarget(t, f.URL(), apiKey), other)

	wrong := newTarget(t, f.URL(), apiKey, func(c *redmine.Config) { c.CustomFieldID = 42 })
	d := downstreamtest.NewDelivery("req-dropped")
	_, err := wrong.Deliver(context.Background(), d)
	e := downstream.Classify(err)
	if err == nil || e.Class != downstream.Permanent || e.MayHaveActed || !strings.Contains(err.Error(), "created issue #2") ||
		!strings.Contains(err.Error(), "custom field 42") || !strings.Contains(err.Error(), f.URL()+"/issues/2") {
		t.Fatalf("Deliver with a dropped field: %v; want a permanent error naming issue #2, its URL and field 42", err)
	}
	if f.Count() != 2 {
		t.Fatalf("%d issues, want 2", f.Count())
	}
	r, found, err := wrong.Find(context.Background(), other)
	if e := downstream.Classify(err); err == nil || found || e.Class != downstream.Transient || !strings.Contains(err.Error(), "custom field 42") {
		t.Fatalf("Find through a field the project does not enable = %+v, %v, %v; want a transient error naming field 42", r, found, err)
	}
}

// A custom field that is not "Used as a filter" is no filter to Redmine: it
// ignores the lookup's filter and lists the project's first issues, oldest
// first. The issue of a lost answer is beyond them; concluding "not found"
// would let the forwarder create it a second time. Find must fail instead,
// and say what to fix.
func TestFindFilterIgnored(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	f.SetFilter(field, false)
	tg := newTarget(t, f.URL(), apiKey)
	ctx := context.Background()

	// A project with no issue: the list is empty, filtered or not, and
	// proves nothing was created.
	if _, found, err := tg.Find(ctx, downstreamtest.NewDelivery("req-none")); err != nil || found {
		t.Fatalf("Find in an empty project = %v, %v; want not found", found, err)
	}
	for i := range 25 {
		deliver(t, tg, downstreamtest.NewDelivery(fmt.Sprintf("req-earlier-%d", i)))
	}
	d := downstreamtest.NewDelivery("req-lost")
	f.Faults.Next(downstreamtest.LoseResponse)
	if _, err := tg.Deliver(ctx, d); err == nil {
		t.Fatal("a lost answer succeeded")
	}
	if f.Count() != 26 {
		t.Fatalf("%d issues, want 26", f.Count())
	}
	r, found, err := tg.Find(ctx, d)
	e := downstream.Classify(err)
	if err == nil || found || e.Class != downstream.Transient || !strings.Contains(err.Error(), `tick "Used as a filter"`) ||
		!strings.Contains(err.Error(), "custom field 7") {
		t.Fatalf("Find through a field that is no filter = %+v, %v, %v; want a transient error telling to tick \"Used as a filter\" on field 7", r, found, err)
	}
	// An issue that carries the key is proof even in an unfiltered list.
	first := downstreamtest.NewDelivery("req-earlier-0")
	if r, ok := find(t, tg, first); !ok || r.ExternalID != "1" {
		t.Fatalf("Find(%q) = %+v, %v; want issue 1", first.Key, r, ok)
	}
	// Ticked: the lookup finds the issue of the lost answer.
	f.SetFilter(field, true)
	if r, ok := find(t, tg, d); !ok || r.ExternalID != "26" {
		t.Fatalf("Find with the filter honoured = %+v, %v; want issue 26", r, ok)
	}
}

// On MySQL Redmine's filter on a custom field ignores case: the lookup of
// one key lists the issue of a key that differs only in case. That issue is
// no proof the filter was ignored, and not the key's issue either.
func TestFindFoldedCase(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	f.SetFoldCase(true)
	tg := newTarget(t, f.URL(), apiKey)
	upper := downstreamtest.NewDelivery("REQ-CASE")
	deliver(t, tg, upper)
	lower := downstreamtest.NewDelivery("req-case")
	if r, ok := find(t, tg, lower); ok {
		t.Fatalf("Find(%q) found %+v, the issue of %q", lower.Key, r, upper.Key)
	}
	if _, ok := find(t, tg, upper); !ok {
		t.Fatalf("Find(%q) misses its issue", upper.Key)
	}
}

func TestSubjectLimits(t *testing.T) {
	long := strings.Repeat("é", 300)
	for _, mode := range keyModes {
		t.Run(mode.name, func(t *testing.T) {
			f := redminetest.New(t, apiKey, "support", mode.field)
			tg := newTarget(t, f.URL(), apiKey, mode.mod...)
			d := downstreamtest.NewDelivery("req-long")
			d.Ticket.Title = long
			deliver(t, tg, d)
			is := f.Issues()[0]
			if n := utf8.RuneCountInString(is.Subject); n != redmine.MaxSubject {
				t.Errorf("subject of %d characters, want %d", n, redmine.MaxSubject)
			}
			if !strings.HasPrefix(is.Description, long+"\n\n") {
				t.Errorf("the description does not start with the full title: %.40q", is.Description)
			}
			if mode.field == 0 && !strings.HasSuffix(is.Subject, " "+redmine.SubjectMarker(d.Key)) {
				t.Errorf("subject %q does not end with the marker", is.Subject)
			}
			if _, ok := find(t, tg, d); !ok {
				t.Error("Find misses the issue with a cut subject")
			}
		})
	}
}

func TestErrors(t *testing.T) {
	f := redminetest.New(t, apiKey, "support", field)
	f.AddProject(redminetest.Project{ID: 2, Identifier: "empty"}) // no trackers
	for _, c := range []struct {
		name    string
		project string
		class   downstream.Class
		status  int
		msg     string
	}{
		{"unknown project", "nope", downstream.Permanent, 422, "Project cannot be blank"},
		{"project without trackers", "empty", downstream.Permanent, 422, "Project cannot be blank; Tracker cannot be blank; Status cannot be blank"},
	} {
		tg := newTarget(t, f.URL(), apiKey, func(cfg *redmine.Config) { cfg.Project = c.project })
		_, err := tg.Deliver(context.Background(), downstreamtest.NewDelivery("req-"+c.project))
		e := downstream.Classify(err)
		if err == nil || e.Class != c.class || e.StatusCode != c.status || e.MayHaveActed || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v; want %s HTTP %d carrying %q", c.name, err, c.class, c.status, c.msg)
		}
	}
	// The lookup of an unknown project is a 404 with no body.
	tg := newTarget(t, f.URL(), apiKey, func(cfg *redmine.Config) { cfg.Project = "nope" })
	_, _, err := tg.Find(context.Background(), downstreamtest.NewDelivery("req-404"))
	e := downstream.Classify(err)
	if err == nil || e.Class != downstream.Permanent || e.StatusCode != 404 || !strings.Contains(err.Error(), `project "nope" not found`) {
		t.Errorf("Find in an unknown project: %v; want permanent 404 naming the project", err)
	}
	_, _, err = newTarget(t, f.URL(), "revoked").Find(context.Background(), downstreamtest.NewDelivery("req-401"))
	if e := downstream.Classify(err); err == nil || e.Class != downstream.Auth || !strings.Contains(err.Error(), "API key was rejected") {
		t.Errorf("Find with a revoked key: %v; want auth", err)
	}
	if f.Count() != 0 {
		t.Fatalf("%d issues, want 0", f.Count())
	}
}

func TestNewValidates(t *testing.T) {
	ok := redmine.Config{Name: "rm", BaseURL: "https://rm.example", APIKey: downstream.NewSecret("k"), Project: "support"}
	for _, c := range []struct {
		mod  func(*redmine.Config)
		want string
	}{
		{func(c *redmine.Config) { c.BaseURL = "rm.example" }, "not an http(s) URL"},
		{func(c *redmine.Config) { c.APIKey = downstream.Secret{} }, "API key is required"},
		{func(c *redmine.Config) { c.Project = "" }, "project identifier is required"},
		{func(c *redmine.Config) { c.Project = "a/b" }, "project identifier is required"},
		{func(c *redmine.Config) { c.TrackerID = -1 }, "positive"},
		{func(c *redmine.Config) { c.PriorityIDs = map[string]int{"high": 0} }, "ids are positive"},
	} {
		cfg := ok
		c.mod(&cfg)
		if _, err := redmine.New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v; want %q", cfg, err, c.want)
		}
	}
	tg, err := redmine.New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprintf("%v %+v %#v", ok, tg, ok); strings.Contains(s, `"k"`) || strings.Contains(s, ":k ") {
		t.Fatalf("printing the config shows the key: %s", s)
	}
}
