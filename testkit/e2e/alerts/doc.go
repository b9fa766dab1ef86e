// Package alerts holds the test of deploy/prometheus/alerts.yml against a
// real Prometheus (Debian's prometheus package) scraping a real dispatcher
// and mcp-front: the first dead letter and auth failure after a start raise
// their alerts. It runs when the prometheus binary is installed (make
// test-alerts installs it and makes its absence a failure) and skips
// otherwise. It has no code of its own, only tests.
package alerts
