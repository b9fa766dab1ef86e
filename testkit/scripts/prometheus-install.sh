#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus and promtool) if promtool
# or prometheus is missing: root; idempotent. make test-alerts runs it before
# the promtool unit tests of deploy/prometheus/alerts.yml and the test
# against a real Prometheus (testkit/e2e/alerts). On a host run by systemd the
# package also enables and starts its own prometheus service (port 9090);
# the tests start their own server on a free port and do not use it.
set -euo pipefail

log() { echo "prometheus-install: $*" >&2; }

if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	log "promtool or prometheus is missing, and installing Debian's prometheus package needs root"
	exit 1
fi
log "installing prometheus (promtool)"
began=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends prometheus >&2
log "installed in $((SECONDS - began))s: $(promtool --version 2>&1 | head -1)"
