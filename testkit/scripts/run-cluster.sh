#!/usr/bin/env bash
# make run-cluster: a multi-host installation on loopback. Three nats-server
# nodes (bin/natscluster, sync_interval: always on each) and two hosts, A
# and B, each its own dispatcher, mcp-front and SQLite file, in one
# installation (-multi-host), delivering to one webhook receiver
# (examples/webhook-receiver) that both hosts share, as hosts of one
# installation must share their targets (deploy/multihost/README.md). Each
# run starts from an empty CLUSTER_DATA. Ctrl-C stops everything, and ends
# cleanly even after a host or a NATS node was killed; NATS stopping by
# itself ends the demonstration with an error.
#
# Settings (environment; the Makefile passes its variables):
#   CLUSTER_DATA        data directory (default data-cluster): nats/, host-a/, host-b/,
#                       receiver/; emptied at the start of each run
#   CLUSTER_RECEIVER    the webhook receiver's address (default 127.0.0.1:9001)
#   CLUSTER_NAME        installation name (default demo)
#   CLUSTER_LISTEN_A/B  MCP address of host A/B (default 127.0.0.1:8081 / 127.0.0.1:8082)
#   CLUSTER_METRICS_A/B metrics of host A/B's mcp-front; its dispatcher's are on
#                       the next port (default 127.0.0.1:9466 / 127.0.0.1:9468)
#   CLUSTER_DEAD_AFTER  -host-dead-after: how long a host may be silent before
#                       the other host publishes and delivers what it left (default 15s)
#   BIN                 where the binaries are (default bin)
set -euo pipefail

DATA=${CLUSTER_DATA:-data-cluster}
NAME=${CLUSTER_NAME:-demo}
LISTEN_A=${CLUSTER_LISTEN_A:-127.0.0.1:8081}
LISTEN_B=${CLUSTER_LISTEN_B:-127.0.0.1:8082}
METRICS_A=${CLUSTER_METRICS_A:-127.0.0.1:9466}
METRICS_B=${CLUSTER_METRICS_B:-127.0.0.1:9468}
DEAD_AFTER=${CLUSTER_DEAD_AFTER:-15s}
RECEIVER=${CLUSTER_RECEIVER:-127.0.0.1:9001}
BIN=${BIN:-bin}

say() { echo "run-cluster: $*" >&2; }
next_port() { echo "${1%:*}:$(( ${1##*:} + 1 ))"; }

# A demonstration starts from nothing: an earlier run's tickets, hosts and
# stream would answer this run's calls. Only a directory this script made
# is emptied: it holds .run-cluster (nats/client-urls before that file).
if [ -e "$DATA" ] && [ -n "$(ls -A "$DATA")" ]; then
	if [ ! -e "$DATA/.run-cluster" ] && [ ! -e "$DATA/nats/client-urls" ]; then
		say "$DATA is not empty and was not made by make run-cluster: choose another CLUSTER_DATA"
		exit 1
	fi
	say "emptying $DATA (the previous run's state)"
	rm -rf "$DATA"
fi
mkdir -p -m 700 "$DATA" "$DATA/host-a" "$DATA/host-b"
touch "$DATA/.run-cluster"
pids=()
stopping=0
stop() {
	trap - INT TERM EXIT
	say "stopping"
	# SIGTERM: the hosts stop cleanly; natscluster kills its nodes. Their
	# statuses do not matter now: a process the user killed has none to give.
	kill -TERM "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap 'exit 130' INT TERM # while starting: stop at once (the EXIT trap stops what started)
trap stop EXIT

# The NATS nodes pick free ports; natscluster writes their URLs once the
# cluster is formed. A stale file from an earlier run must not be read.
rm -f "$DATA/nats/client-urls"
"$BIN/natscluster" -dir "$DATA/nats" -bin "$BIN/nats-server" 2>"$DATA/nats.log" &
nats_pid=$!
pids+=("$nats_pid")
say "starting 3 NATS nodes (log: $DATA/nats.log)"
for _ in $(seq 1 600); do # 60 s
	[ -s "$DATA/nats/client-urls" ] && break
	kill -0 "$nats_pid" 2>/dev/null || { say "natscluster exited:"; tail -20 "$DATA/nats.log" >&2; exit 1; }
	sleep 0.1
done
[ -s "$DATA/nats/client-urls" ] || { say "the NATS cluster did not form within 60 s:"; tail -20 "$DATA/nats.log" >&2; exit 1; }
URLS=$(cat "$DATA/nats/client-urls")

# The receiver both hosts deliver to; it makes the signing secret, which
# both hosts' dispatchers read from its file.
"$BIN/webhook-receiver" -listen "$RECEIVER" -dir "$DATA/receiver" >/dev/null 2>"$DATA/receiver.log" &
receiver_pid=$!
pids+=("$receiver_pid")
for _ in $(seq 1 300); do # 30 s
	curl -s -o /dev/null "http://$RECEIVER/tickets/T-0" && break
	kill -0 "$receiver_pid" 2>/dev/null || { say "the webhook receiver exited:"; cat "$DATA/receiver.log" >&2; exit 1; }
	sleep 0.1
done
curl -s -o /dev/null "http://$RECEIVER/tickets/T-0" || { say "the webhook receiver does not answer after 30 s:"; cat "$DATA/receiver.log" >&2; exit 1; }
WEBHOOK_SECRET=$(cat "$DATA/receiver/secret")
export WEBHOOK_SECRET
cat >"$DATA/ticketrelay.yaml" <<YAML
# make run-cluster: both hosts deliver to one webhook receiver.
targets:
  - name: hook
    kind: webhook
    endpoint: http://$RECEIVER/tickets
    options:
      signing_secret_env: WEBHOOK_SECRET
tools:
  - name: create_ticket
    description: Send a ticket to the webhook receiver.
    target: hook
YAML

# start_host X LISTEN METRICS: a dispatcher and an mcp-front on DATA/host-x,
# logging to DATA/host-x/*.log, their pids in DATA/host-x/*.pid.
start_host() {
	local h=$1 listen=$2 metrics=$3 dir="$DATA/host-$1"
	local common=(-multi-host -nats "$URLS" -installation "$NAME" -config "$DATA/ticketrelay.yaml")
	"$BIN/dispatcher" -data "$dir" "${common[@]}" -host-dead-after "$DEAD_AFTER" \
		-metrics-listen "$(next_port "$metrics")" 2>>"$dir/dispatcher.log" &
	echo $! >"$dir/dispatcher.pid"
	pids+=($!)
	"$BIN/mcp-front" -create-db -db "$dir/tickets.db" "${common[@]}" -listen "$listen" -metrics-listen "$metrics" \
		-stateless 2>>"$dir/mcp-front.log" &
	echo $! >"$dir/mcp-front.pid"
	pids+=($!)
	say "host ${h^^}: MCP http://$listen/mcp (logs: $dir/dispatcher.log, $dir/mcp-front.log)"
}
start_host a "$LISTEN_A" "$METRICS_A"
start_host b "$LISTEN_B" "$METRICS_B"

# Wait until both fronts answer a tool call: the dispatchers have made the
# stream and the bucket, and the fronts have bound them.
call() { # call ADDR TOOL JSON-ARGS
	curl -sS --max-time 30 "http://$1/mcp" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
		-H 'MCP-Protocol-Version: 2025-11-25' -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}"
}
for addr in "$LISTEN_A" "$LISTEN_B"; do
	for _ in $(seq 1 600); do # 60 s
		if call "$addr" find_request '{"request_id":"run-cluster-ready"}' 2>/dev/null | grep -q '"status'; then
			continue 2
		fi
		sleep 0.1
	done
	say "http://$addr/mcp does not answer after 60 s; see $DATA/host-*/*.log"
	exit 1
done

# And until both hosts beat in the cluster record: a host killed before its
# first heartbeat is one no other host knows to adopt.
for _ in $(seq 1 120); do # 60 s
	live=$("$BIN/dispatcher" status -data "$DATA/host-a" -multi-host -nats "$URLS" -installation "$NAME" \
		-host-dead-after "$DEAD_AFTER" 2>/dev/null | grep -c ' live ' || true)
	[ "$live" -ge 2 ] && break
	sleep 0.5
done
[ "$live" -ge 2 ] || { say "both hosts did not beat in the cluster record within 60 s; see $DATA/host-*/dispatcher.log"; exit 1; }

A=http://$LISTEN_A/mcp B=http://$LISTEN_B/mcp
# The version header: a sessionless request without one is served as the
# protocol's default (2025-03-26), whose answers carry no structuredContent.
H="-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25'"
cat <<EOF

ticketrelay: installation "$NAME" on 3 NATS nodes, two hosts. Ctrl-C stops everything.

  host A    $A    data $DATA/host-a
  host B    $B    data $DATA/host-b
  NATS      $URLS
  receiver  http://$RECEIVER/tickets    tickets $DATA/receiver/tickets.jsonl
            (both hosts deliver here: $DATA/ticketrelay.yaml)

Add both to Claude Code (two servers of one installation):
  claude mcp add --transport http tickets-a $A
  claude mcp add --transport http tickets-b $B

Kill a host and watch no ticket be lost (in another terminal):

 1. Stop host A's dispatcher: what host A accepts now stays in its outbox.
      kill -9 \$(cat $DATA/host-a/dispatcher.pid)
 2. File a ticket on host A (it answers "queued": accepted, in the cluster record):
      curl -s $A $H \\
        -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_ticket","arguments":{"request_id":"demo-1","title":"Checkout fails"}}}'
 3. Host B knows it too: find_request on B says "queued" with the same ticket_id (and
    create_ticket there with the same arguments answers "replayed": true):
      curl -s $B $H \\
        -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"find_request","arguments":{"request_id":"demo-1"}}}'
 4. Lose host A for good, data directory and all:
      kill -9 \$(cat $DATA/host-a/mcp-front.pid); rm -rf $DATA/host-a
 5. After $DEAD_AFTER host B adopts what A left and delivers it: repeat step 3 until
    "status":"delivered" with its external_url; the receiver holds it once:
      grep -c '"request_id":"demo-1"' $DATA/receiver/tickets.jsonl
    Host B's dispatcher logs "adopted a lost host's unpublished requests", and
      $BIN/dispatcher status -data $DATA/host-b -multi-host -nats $URLS -installation $NAME -host-dead-after $DEAD_AFTER
    shows host A adopted (metrics: http://$(next_port "$METRICS_B")/metrics, ticketrelay_cluster_*).

A NATS node may be killed too (its pid is in $DATA/nats.log): one of three is
survivable; two lose the quorum, and calls then fail with a retryable error.
Ctrl-C stops everything; the next run starts over from an empty $DATA.
EOF

# Run until Ctrl-C, or until the NATS cluster is gone. A Ctrl-C interrupts
# the wait and sets stopping; natscluster may exit from the same Ctrl-C
# first (with status 1 if the user killed a node), and the trap still runs
# before the next command, so stopping tells the two apart.
set +e
trap 'stopping=1' INT TERM
wait "$nats_pid"
rc=$?
if [ "$stopping" = 1 ]; then
	stop
	say "stopped"
	exit 0
fi
say "natscluster exited (status $rc): stopping the hosts"
exit $((rc == 0 ? 1 : rc))
