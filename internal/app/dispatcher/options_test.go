package dispatcher

import (
	"errors"
	"flag"
	"io"
	"path/filepath"
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
