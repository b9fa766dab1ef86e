#!/usr/bin/env bash
# Installs Debian's nats-server package if it is missing (root;
# idempotent) and prints the path of its binary on stdout. make
# test-debian-nats runs it before the tests of a dispatcher against that
# server (natsjs's TestDebianNATSServer and testkit/e2e/debiannats), which start
# their own servers on free ports. On a host run by systemd the package also
# enables and starts its own nats-server service (port 4222); the tests do
# not use it.
set -euo pipefail

BIN=/usr/sbin/nats-server

log() { echo "debian-nats-install: $*" >&2; }

if [ "$(dpkg-query -W -f='${db:Status-Status}' nats-server 2>/dev/null)" != installed ]; then
	if [ "$(id -u)" != 0 ]; then
		log "nats-server is not installed, and installing Debian's package needs root"
		exit 1
	fi
	log "installing nats-server"
	began=$SECONDS
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends nats-server >&2
	# The package enables and, under systemd, starts a server on 4222,
	# where make run's embedded broker listens: the tests start their own.
	if [ -d /run/systemd/system ]; then
		systemctl disable --now nats-server.service >&2 || log "could not stop the package's nats-server service"
	fi
	log "installed in $((SECONDS - began))s"
fi
[ -x "$BIN" ] || { log "the nats-server package has no $BIN"; exit 1; }
log "$("$BIN" --version 2>&1)"
echo "$BIN"
