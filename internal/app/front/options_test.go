package front

import (
	"flag"
	"io"
	"testing"
)

// parse is Options from args, as Run parses them, with WithDefaults.
func parse(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("mcp-front", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return o.WithDefaults()
}

func TestRateLimitAuto(t *testing.T) {
	for _, c := range []struct {
		args []string
		want float64
	}{
		{nil, 0}, // loopback: no limit
		{[]string{"-listen", "0.0.0.0:8080"}, 20},
		{[]string{"-listen", "0.0.0.0:8080", "-rate-limit", "0"}, 0},
		{[]string{"-listen", "0.0.0.0:8080", "-rate-limit", "auto"}, 20},
		{[]string{"-listen", "0.0.0.0:8080", "-rate-limit", "-1"}, 20}, // the old default's spelling
		{[]string{"-rate-limit", "2.5"}, 2.5},
	} {
		if got := parse(t, c.args...).httpConfig().RateLimit.PerSecond; got != c.want {
			t.Errorf("%v: %v requests/s, want %v", c.args, got, c.want)
		}
	}
	var a Auto
	if err := a.Set("fast"); err == nil {
		t.Error("-rate-limit fast was taken")
	}
}

// The flags' "0: none" is mcphttp's "negative: none"; other values pass.
func TestHTTPConfigNone(t *testing.T) {
	hc := parse(t, "-max-sessions", "0", "-max-sessions-per-subject", "0", "-max-sessions-per-address", "7",
		"-event-store-bytes", "0", "-session-unused-timeout", "0").httpConfig()
	if hc.MaxSessions != -1 || hc.MaxSessionsPerSubject != -1 || hc.MaxSessionsPerAddress != 7 || hc.EventStoreBytes != -1 || hc.UnusedSessionTimeout != -1 {
		t.Errorf("0 did not become none: %+v", hc)
	}
	if hc := parse(t, "-event-store-bytes", "-5").httpConfig(); hc.EventStoreBytes != -1 {
		t.Errorf("-event-store-bytes -5: %d, want -1 (none)", hc.EventStoreBytes)
	}
	d := parse(t).httpConfig()
	if d.MaxSessions <= 0 || d.EventStoreBytes <= 0 || d.UnusedSessionTimeout <= 0 {
		t.Errorf("the defaults are not bounds: %+v", d)
	}
}

func TestStdioTurnsMetricsOff(t *testing.T) {
	if o := parse(t, "-stdio"); o.MetricsListen != "" {
		t.Errorf("-stdio: metrics on %q", o.MetricsListen)
	}
	var o Options
	fs := flag.NewFlagSet("mcp-front", flag.ContinueOnError)
	o.flags(fs)
	if err := fs.Parse([]string{"-stdio", "-metrics-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	o.metricsListenSet = true
	if o = o.WithDefaults(); o.MetricsListen != "127.0.0.1:0" {
		t.Errorf("-stdio -metrics-listen 127.0.0.1:0: metrics on %q", o.MetricsListen)
	}
}
