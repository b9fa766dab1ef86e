package dispatcher

import (
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"ticketrelay/internal/app"
)

func parseOptions(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o.WithDefaults()
}

func TestOptionsDefaults(t *testing.T) {
	o := parseOptions(t, "-data", "d")
	if o.DB != filepath.Join("d", "tickets.db") || o.Replicas != 1 || o.BucketMaxBytes != 0 {
		t.Errorf("-data d: db %q, replicas %d, bucket %d", o.DB, o.Replicas, o.BucketMaxBytes)
	}
	if o := parseOptions(t, "-multi-host", "-db", "x.db", "-replicas", "0"); o.Replicas != 3 || o.DB != "x.db" {
		t.Errorf("-multi-host: replicas %d, db %q", o.Replicas, o.DB)
	}
	if o := parseOptions(t, "-multi-host", "-replicas", "5"); o.Replicas != 5 {
		t.Errorf("-replicas 5: %d", o.Replicas)
	}
	none := func(string) (string, bool) { return "", false }
	if err := parseOptions(t).Validate(none); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	for _, args := range [][]string{{"-multi-host"}, {"-nats", "nats://h:4222"}, {"-host-dead-after", "10ms"},
		{"-nats-listen", "0.0.0.0:4222"}, {"-dup-window", "2h", "-retention", "1h"}, {"-audit-after", "10s"}} {
		if err := parseOptions(t, args...).Validate(none); !errors.Is(err, app.ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// The console's OAuth sign-in comes whole: issuer, the console's URL, the
// client's registration, one scope; and it counts as sign-in beyond
// loopback.
func TestOptionsConsoleOAuth(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	whole := []string{"-console-listen", "0.0.0.0:9470", "-console-url", "https://ops.example", "-console-oauth-issuer", "https://idp.example",
		"-console-oauth-client-id", "console", "-console-oauth-client-secret-file", "secret"}
	o := parseOptions(t, whole...)
	if err := o.Validate(none); err != nil {
		t.Errorf("%v: %v", whole, err)
	}
	if o.ConsoleOAuth.Scope != DefaultOperatorScope {
		t.Errorf("default scope %q", o.ConsoleOAuth.Scope)
	}
	for name, args := range map[string][]string{
		"no issuer":        {"-console-oauth-client-id", "console"},
		"issuer not a URL": {"-console-url", "https://ops.example", "-console-oauth-issuer", "idp.example", "-console-oauth-client-id", "c", "-console-oauth-client-secret-file", "s"},
		"no console URL":   {"-console-oauth-issuer", "https://idp.example", "-console-oauth-client-id", "c", "-console-oauth-client-secret-file", "s"},
		"no client secret": {"-console-url", "https://ops.example", "-console-oauth-issuer", "https://idp.example", "-console-oauth-client-id", "c"},
		"two scopes":       append(append([]string{}, whole...), "-console-oauth-scope", "a b"),
		"beyond loopback":  {"-console-listen", "0.0.0.0:9470"},
	} {
		if err := parseOptions(t, args...).Validate(none); !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "-console") {
			t.Errorf("%s: %v, want a usage error naming the flag", name, err)
		}
	}
}
