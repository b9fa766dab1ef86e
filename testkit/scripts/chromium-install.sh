#!/usr/bin/env bash
# Installs Debian's chromium package if chromium is missing: root;
# idempotent. make test-console runs it before driving the operator console
# with a real headless browser (internal/app/console_browser_test.go).
set -euo pipefail

log() { echo "chromium-install: $*" >&2; }

if command -v chromium >/dev/null; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	log "chromium is missing, and installing Debian's chromium package needs root"
	exit 1
fi
log "installing chromium"
began=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium >&2
log "installed in $((SECONDS - began))s: $(chromium --version 2>&1 | head -1)"
