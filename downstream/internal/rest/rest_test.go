package rest

import (
	"net/http"
	"testing"
	"time"

	"ticketrelay/downstream"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{"Fri, 01 May 2026 12:00:30 GMT", 30 * time.Second},
		{"Fri, 01 May 2026 11:59:00 GMT", 0}, // in the past
		{"99999999", 24 * time.Hour},         // capped
	} {
		h := http.Header{}
		if c.v != "" {
			h.Set("Retry-After", c.v)
		}
		if got := RetryAfter(h, now); got != c.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", c.v, got, c.want)
		}
	}
}

func TestFail(t *testing.T) {
	c := NewClient(nil, func() time.Time { return time.Unix(0, 0) })
	for _, x := range []struct {
		status int
		class  downstream.Class
		acted  bool
	}{
		{400, downstream.Permanent, false},
		{401, downstream.Auth, false},
		{403, downstream.Auth, false},
		{404, downstream.Permanent, false},
		{408, downstream.Transient, false},
		{422, downstream.Permanent, false},
		{429, downstream.Transient, false},
		{500, downstream.Transient, true},
		{502, downstream.Transient, true},
		{503, downstream.Transient, true},
	} {
		e := c.Fail(&Response{Status: x.status, Header: http.Header{"Retry-After": {"3"}}}, "the API's words")
		if e.Class != x.class || e.MayHaveActed != x.acted || e.StatusCode != x.status || e.RetryAfter != 3*time.Second || e.Err.Error() != "the API's words" {
			t.Errorf("Fail(%d) = %+v; want %s, may have acted %v", x.status, e, x.class, x.acted)
		}
	}
}

func TestMessage(t *testing.T) {
	if got := Message(&Response{Status: 502}); got != "Bad Gateway" {
		t.Errorf("empty body: %q", got)
	}
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'x'
	}
	if got := Message(&Response{Status: 400, Body: long}); len(got) > 510 {
		t.Errorf("a long body gives a %d-byte message", len(got))
	}
}
