#!/usr/bin/env bash
# A real Redmine for the tests of the redmine target (make test-redmine).
#
#   testkit/scripts/redmine-up.sh install      install Debian's redmine, redmine-sqlite
#                                      and ruby-webrick if missing (root; idempotent)
#   testkit/scripts/redmine-up.sh serve DIR    install if needed, then run a fresh Redmine
#                                      whose files (SQLite database, logs) live in DIR
#
# serve creates a new database in DIR (migrations and Redmine's default data:
# trackers, statuses, priorities), enables the REST API, creates an issue
# custom field "ticketrelay request" (a filter), a project and the admin's API
# key with `bin/rails runner`, and starts `bin/rails server -u webrick` in
# production mode on 127.0.0.1 at a free port. Once Redmine answers, it prints
# on stdout, one KEY=value a line:
#
#   REDMINE_URL=http://127.0.0.1:PORT
#   REDMINE_API_KEY=…            (the admin's: it may create projects)
#   REDMINE_CUSTOM_FIELD_ID=1
#   REDMINE_PROJECT=ticketrelay
#   REDMINE_READY=1              (the last line)
#
# and then waits. SIGTERM or SIGINT (or the exit of the process that started
# it) stops the server. Everything else it says goes to stderr; DIR/log holds
# the server's and the set-up's logs.
set -euo pipefail

REDMINE_ROOT=/usr/share/redmine
PACKAGES=(redmine redmine-sqlite ruby-webrick)

log() { echo "redmine-up: $*" >&2; }
die() { log "$*"; exit 1; }

installed() {
	local p
	for p in "${PACKAGES[@]}"; do
		[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || return 1
	done
}

install() {
	if ! installed; then
		[ "$(id -u)" = 0 ] || die "${PACKAGES[*]} are not all installed, and installing them needs root"
		log "installing ${PACKAGES[*]} (about a minute)"
		local began=$SECONDS
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2
		apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >&2
		log "installed in $((SECONDS - began))s"
	fi
	# Debian's Gemfile names no web server: webrick comes through Gemfile.local.
	if ! grep -qs '^gem "webrick"' "$REDMINE_ROOT/Gemfile.local"; then
		[ -w "$REDMINE_ROOT" ] || die "cannot write $REDMINE_ROOT/Gemfile.local (needs root)"
		echo 'gem "webrick"' >>"$REDMINE_ROOT/Gemfile.local"
		log "added webrick to $REDMINE_ROOT/Gemfile.local"
	fi
}

serve() {
	local dir=$1
	install
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	mkdir -p "$dir"/{config,db,files,log,public,tmp/pids}

	# Redmine (Debian) reads an instance's config, logs and cache from
	# /usr/share/redmine/instances/NAME, i.e. /var/lib/redmine/NAME: point one
	# at DIR. Links left by runs that died are removed first.
	local instance="ticketrelay-test-$$"
	local link="$REDMINE_ROOT/instances/$instance"
	local l
	for l in "$REDMINE_ROOT"/instances/ticketrelay-test-*; do
		[ -L "$l" ] && [ ! -e "$l" ] && rm -f "$l"
	done
	ln -sfn "$dir" "$link"

	cat >"$dir/config/database.yml" <<-EOF
		production:
		  adapter: sqlite3
		  database: $dir/db/redmine.sqlite3
		  encoding: utf8
		  timeout: 10000
	EOF
	head -c 48 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/config/secret_key.txt"

	local server=""
	local parent=$PPID
	cleanup() {
		trap - EXIT INT TERM
		if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
			kill -TERM "$server" 2>/dev/null || true
			local i
			for i in $(seq 1 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$server" 2>/dev/null || true
		fi
		rm -f "$link"
		[ -n "${watchdog:-}" ] && kill "$watchdog" 2>/dev/null || true
	}
	trap cleanup EXIT
	trap 'exit 0' INT TERM

	export REDMINE_INSTANCE=$instance RAILS_ENV=production
	cd "$REDMINE_ROOT"
	local began=$SECONDS
	log "migrating a fresh database in $dir/db"
	if ! bin/rake db:migrate >"$dir/log/setup.log" 2>&1; then
		tail -n 30 "$dir/log/setup.log" >&2
		die "db:migrate failed (log: $dir/log/setup.log)"
	fi

	cat >"$dir/setup.rb" <<-'EOF'
		# Runs in the app (bin/rails runner): default data, REST API, the custom
		# field, a project and the API key. Prints KEY=value lines.
		Redmine::DefaultData::Loader.load('en') if Redmine::DefaultData::Loader.no_data?
		raise 'no trackers after loading the default data' if Tracker.count == 0
		Setting.rest_api_enabled = '1'
		cf = IssueCustomField.find_by(name: 'ticketrelay request') || IssueCustomField.create!(
		  name: 'ticketrelay request', field_format: 'string', is_for_all: true, is_filter: true,
		  visible: true, searchable: false, tracker_ids: Tracker.pluck(:id))
		project = Project.find_by(identifier: 'ticketrelay') || Project.create!(
		  name: 'ticketrelay', identifier: 'ticketrelay', is_public: false,
		  tracker_ids: Tracker.pluck(:id), issue_custom_field_ids: [cf.id], enabled_module_names: %w[issue_tracking])
		admin = User.find_by_login('admin') or raise 'no admin user'
		puts "REDMINE_API_KEY=#{admin.api_key}"
		puts "REDMINE_CUSTOM_FIELD_ID=#{cf.id}"
		puts "REDMINE_PROJECT=#{project.identifier}"
	EOF
	log "loading the default data, enabling the REST API, creating the custom field, the project and the API key"
	if ! bin/rails runner "$dir/setup.rb" >"$dir/setup.env" 2>>"$dir/log/setup.log"; then
		tail -n 30 "$dir/log/setup.log" >&2
		die "the set-up runner failed (log: $dir/log/setup.log)"
	fi
	local key
	key=$(sed -n 's/^REDMINE_API_KEY=//p' "$dir/setup.env")
	[ -n "$key" ] || die "the set-up runner printed no API key"

	local port
	port=$(ruby -rsocket -e 's = TCPServer.new("127.0.0.1", 0); puts s.addr[1]; s.close')
	log "starting bin/rails server -u webrick on 127.0.0.1:$port"
	bin/rails server -u webrick -b 127.0.0.1 -p "$port" -e production -P "$dir/tmp/pids/server.pid" \
		>"$dir/log/server.log" 2>&1 &
	server=$!

	# Stop when the process that started us goes away, however it ended.
	(while kill -0 "$parent" 2>/dev/null; do sleep 1; done; kill -TERM $$ 2>/dev/null) &
	watchdog=$!

	# Ready: the REST API answers the key.
	local url="http://127.0.0.1:$port"
	local i
	for i in $(seq 1 600); do
		kill -0 "$server" 2>/dev/null || { tail -n 30 "$dir/log/server.log" >&2; die "the server exited during start-up"; }
		if ruby -rnet/http -e 'r = Net::HTTP.get_response(URI(ARGV[0]), "X-Redmine-API-Key" => ARGV[1]) rescue exit(1); exit(r.code == "200" ? 0 : 1)' \
			"$url/issues.json?limit=1" "$key" 2>/dev/null; then
			break
		fi
		[ "$i" = 600 ] && die "the server did not answer within 120s (log: $dir/log/server.log)"
		sleep 0.2
	done
	log "ready at $url after $((SECONDS - began))s"
	echo "REDMINE_URL=$url"
	cat "$dir/setup.env"
	echo "REDMINE_READY=1"
	wait "$server" || true
}

case "${1:-}" in
install) install ;;
serve)
	[ $# = 2 ] || die "usage: $0 serve DIR"
	serve "$2"
	;;
*) die "usage: $0 install | serve DIR" ;;
esac
