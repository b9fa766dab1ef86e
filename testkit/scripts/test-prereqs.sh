#!/usr/bin/env bash
# make test's first step: check (or install) what the suite needs before
# it starts, one line each, so a fresh machine fails here with what to do
# instead of minutes into the run. Needs: Go at go.mod's version, a C
# compiler (the race detector uses cgo), curl (the docs' tests run the
# README's curl session), and every module the tests and
# vet use, downloaded now (the tests build nats-server and our binaries).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
say() { printf 'make test [1/4]: %s\n' "$*"; }

# Go. GOTOOLCHAIN=local: the version installed here, not one the go
# command would fetch to satisfy go.mod.
want=$(sed -n 's/^go \([0-9.]*\).*/\1/p' go.mod)
if ! command -v "$GO" >/dev/null; then
	say "Go $want or newer is needed and '$GO' is not on PATH: install Go $want, then run make test again"
	exit 1
fi
have=$(GOTOOLCHAIN=local "$GO" env GOVERSION)
if [ "$(printf '%s\n%s\n' "go$want" "$have" | sort -V | head -n1)" != "go$want" ]; then
	if [ "$(GOTOOLCHAIN= "$GO" env GOTOOLCHAIN)" = local ]; then
		say "Go $want or newer is needed, found $have (GOTOOLCHAIN=local): install Go $want"
		exit 1
	fi
	say "Go $want or newer is needed, found $have: fetching the go$want toolchain through the module proxy"
	"$GO" version >/dev/null
fi
say "Go: $("$GO" env GOVERSION) (go.mod: $want)"

# A C compiler for -race.
cc=$("$GO" env CC)
cc=${cc%% *}
if ! command -v "$cc" >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		say "C compiler for -race: $cc missing, installing gcc and libc6-dev with apt-get (about a minute)"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
		cc=gcc
	else
		say "C compiler for -race: $cc not found; install gcc (Debian: sudo apt-get install gcc), or run make test/short (no race detector)"
		exit 1
	fi
fi
if [ "$(CC=$cc "$GO" env CGO_ENABLED)" != 1 ]; then
	say "C compiler for -race: $cc found, but CGO_ENABLED=0 in the environment; unset it (the race detector needs cgo)"
	exit 1
fi
say "C compiler for -race: $(command -v "$cc")"

# curl: the docs' tests run the README's curl session as a user would.
if ! command -v curl >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		say "curl (the README's curl session is run as written): missing, installing it with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
	else
		say "curl not found: the docs' tests run the README's curl session; install curl (Debian: sudo apt-get install curl)"
		exit 1
	fi
fi
say "curl: $(command -v curl)"

# Modules: the main module's (with nats-server's command, which the tests
# build), and the modules of their own that vet and the tests use.
say "downloading modules: ticketrelay, third_party/segmentio-encoding, bench/noopserver, bench/riverbaseline, testkit/tools/staticcheck"
"$GO" mod download
"$GO" list -deps github.com/nats-io/nats-server/v2 >/dev/null
for m in third_party/segmentio-encoding bench/noopserver bench/riverbaseline testkit/tools/staticcheck; do
	(cd "$m" && "$GO" mod download)
done

# staticcheck, the version testkit/tools/staticcheck/go.mod pins: built now (go
# tool caches it), so vet's step only runs it.
say "staticcheck: building the pinned version (the first time takes a few minutes)"
say "staticcheck: $("$GO" tool -modfile="$PWD/testkit/tools/staticcheck/go.mod" staticcheck -version)"

# Optional: the power-cut tests need root and /dev/fuse; they skip without.
if [ "$(id -u)" = 0 ] && [ -e /dev/fuse ]; then
	say "power-cut tests: run (root, /dev/fuse present)"
else
	say "power-cut tests: skipped (they need root and /dev/fuse)"
fi
