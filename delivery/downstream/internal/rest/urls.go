package rest

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"ticketrelay/delivery/downstream"
)

// SafeURL renders u for an error or a log: without userinfo, query and
// fragment (they carry credentials: user:password@, ?token=…), and, with
// hide, without its path either (a hook URL whose path is the credential).
func SafeURL(u *url.URL, hide bool) string {
	if u == nil {
		return ""
	}
	if hide {
		return u.Scheme + "://" + u.Host + "/" + downstream.Redacted
	}
	s := *u
	s.User = nil
	s.RawQuery, s.ForceQuery, s.Fragment, s.RawFragment = "", false, "", ""
	return s.String()
}

// SafeRawURL is SafeURL for a string that may not parse. One that does not
// is shown as Redacted: where its userinfo or query would be cannot be told
// ("http://user:password/x" reads as a host with a bad port).
func SafeRawURL(raw string, hide bool) string {
	if u, err := url.Parse(raw); err == nil {
		return SafeURL(u, hide)
	}
	return downstream.Redacted
}

// quoted matches what url.Parse's errors quote of a URL (a port, an
// escape, a character of the host).
var quoted = regexp.MustCompile(`"[^"]*"`)

// RedactURLError makes every *url.Error in err's chain show its URL as
// SafeRawURL does, and what a parse error quotes of the URL elided. It
// changes err in place and returns it.
func RedactURLError(err error, hide bool) error {
	for e := err; e != nil; {
		if ue, ok := e.(*url.Error); ok {
			ue.URL = SafeRawURL(ue.URL, hide)
			if ue.Op == "parse" && ue.Err != nil {
				ue.Err = errors.New(quoted.ReplaceAllString(ue.Err.Error(), `"…"`))
			}
		}
		switch x := e.(type) {
		case interface{ Unwrap() error }:
			e = x.Unwrap()
		default:
			e = nil
		}
	}
	return err
}

// BaseURL checks an adapter's configured endpoint and returns it without a
// trailing slash. kind and name make the error say which target is wrong;
// example (may be empty) shows what a good endpoint looks like.
func BaseURL(kind, name, endpoint, example string) (string, error) {
	base := strings.TrimRight(endpoint, "/")
	if strings.HasPrefix(base, "http://") || strings.HasPrefix(base, "https://") {
		return base, nil
	}
	if example != "" {
		example = " (e.g. " + example + ")"
	}
	return "", fmt.Errorf("%s %q: endpoint %q is not an http(s) URL%s", kind, name, SafeRawURL(endpoint, false), example)
}
