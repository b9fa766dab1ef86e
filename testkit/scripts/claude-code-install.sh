#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (npm @anthropic-ai/claude-code, version
# CLAUDE_CODE_VERSION) once into a cache directory outside the repository,
# and prints the path of its `claude` binary on stdout; progress goes to
# stderr. make test-docs runs the docs' `claude mcp` lines with it.
#
#   CLAUDE_CODE_VERSION  the version (the Makefile pins it)
#   CLAUDE_CODE_CACHE    the cache directory (default
#                        ${XDG_CACHE_HOME:-$HOME/.cache}/ticketrelay)
#
# The package brings a native binary per platform (an optional dependency,
# ~400 MB unpacked): too large to install in every make test, so it is
# installed once per version and kept.
set -euo pipefail
version=${CLAUDE_CODE_VERSION:?CLAUDE_CODE_VERSION is not set}
cache=${CLAUDE_CODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ticketrelay}
dir="$cache/claude-code-$version"
bin="$dir/node_modules/.bin/claude"

installed() { [[ -x "$bin" ]] && [[ "$("$bin" --version 2>/dev/null)" == "$version "* ]]; }

if ! installed; then
	command -v npm >/dev/null || { echo "claude-code-install: npm is needed (Node 20 or later)" >&2; exit 1; }
	echo "claude-code-install: installing @anthropic-ai/claude-code@$version into $dir (once; ~400 MB)" >&2
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.claude-code-$version.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# Its postinstall puts the platform's native binary in place. The
	# package asks for Node 22 but runs no Node code once installed.
	npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error --engine-strict=false \
		"@anthropic-ai/claude-code@$version" >&2
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	installed || { echo "claude-code-install: $bin does not report version $version" >&2; exit 1; }
fi
echo "$bin"
