package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A stream as go test -json writes it: one package passing, one without
// tests, one whose test fails, one that does not build.
const stream = `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestOK"}
{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"a","Test":"TestOK","Elapsed":0.1}
{"Action":"output","Package":"a","Output":"ok  \ta\t0.2s\n"}
{"Action":"pass","Package":"a","Elapsed":0.2}
{"Action":"start","Package":"b"}
{"Action":"output","Package":"b","Output":"?   \tb\t[no test files]\n"}
{"Action":"skip","Package":"b","Elapsed":0}
{"Action":"start","Package":"c"}
{"Action":"output","Package":"c","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"c","Test":"TestBad","Output":"    c_test.go:9: want 1, got 2\n"}
{"Action":"output","Package":"c","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"c","Test":"TestBad","Elapsed":0}
{"Action":"output","Package":"c","Test":"TestGood","Output":"=== RUN   TestGood\n"}
{"Action":"pass","Package":"c","Test":"TestGood","Elapsed":0}
{"Action":"output","Package":"c","Output":"FAIL\tc\t0.3s\n"}
{"Action":"fail","Package":"c","Elapsed":0.3}
{"ImportPath":"d [d.test]","Action":"build-output","Output":"d/d_test.go:3:1: syntax error\n"}
{"ImportPath":"d [d.test]","Action":"build-fail"}
{"Action":"start","Package":"d"}
{"Action":"output","Package":"d","Output":"FAIL\td [build failed]\n"}
{"Action":"fail","Package":"d","Elapsed":0,"FailedBuild":"d [d.test]"}
not json: passed through
`

func TestPrinter(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPrinter(&out, func() time.Time { return now })
	failed, err := p.read(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("failed = false, want true")
	}
	want := `  ok    a  0.2s
    c_test.go:9: want 1, got 2
--- FAIL: TestBad (0.00s)
  FAIL  c  0.3s
d/d_test.go:3:1: syntax error
FAIL	d [build failed]
  FAIL  d  0.0s
not json: passed through
  1 packages passed, 2 failed, 1 without tests, in 0s
`
	got := out.String()
	// The failing test's "=== RUN" line is part of its output too.
	want = strings.Replace(want, "    c_test.go", "=== RUN   TestBad\n    c_test.go", 1)
	want = strings.Replace(want, "  FAIL  c  0.3s", "FAIL\tc\t0.3s\n  FAIL  c  0.3s", 1)
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestPrinterPasses(t *testing.T) {
	var out bytes.Buffer
	p := newPrinter(&out, time.Now)
	failed, err := p.read(strings.NewReader(`{"Action":"start","Package":"a"}
{"Action":"pass","Package":"a","Elapsed":1}
`))
	if err != nil || failed {
		t.Fatalf("failed = %v, err = %v; want false, nil", failed, err)
	}
}

func TestHeartbeatNamesWhatRuns(t *testing.T) {
	var out bytes.Buffer
	var mu = make(chan time.Time, 1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mu <- now
	clock := func() time.Time { t := <-mu; mu <- t; return t }
	p := newPrinter(&out, clock)
	p.handle(event{Action: "start", Package: "slow"})
	<-mu
	mu <- now.Add(2 * time.Minute)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { p.heartbeat(30*time.Millisecond, stop); close(done) }()
	deadline := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		s := out.String()
		p.mu.Unlock()
		if strings.Contains(s, "still running: slow (2m0s)") {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("no heartbeat naming the package within 10 s; output %q", s)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(stop)
	<-done
}
