# ticketrelay — the team's vocabulary. CI runs the same targets (.ci/run).
GO       ?= go
DATA     ?= data
# make run's addresses: mcp-front's MCP endpoint and /metrics, the
# dispatcher's /metrics and its embedded nats-server (clients). An empty
# metrics address turns that listener off.
LISTEN             ?= 127.0.0.1:8080
FRONT_METRICS      ?= 127.0.0.1:9464
DISPATCHER_METRICS ?= 127.0.0.1:9465
NATS_LISTEN        ?= 127.0.0.1:4222
# Claude Code for make test-docs and make test-oauth (testkit/scripts/claude-code-install.sh).
CLAUDE_CODE_VERSION ?= 2.1.332
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X ticketrelay/internal/app.Version=$(VERSION)
# Binaries are static: nothing of ours needs cgo (modernc.org/sqlite is pure
# Go), and a process that maps no libc is smaller resident (decision 0082 has
# the measurements). Tests keep cgo: the race detector needs it.
BUILD    := CGO_ENABLED=0 $(GO) build

.PHONY: all build run test test/short test/race lint vet fmt bench clean interop test-redmine test-oauth test-traces test-console

all: build

build: ## build bin/mcp-front and bin/dispatcher
	$(BUILD) -ldflags '$(LDFLAGS)' -o bin/ ./cmd/mcp-front ./cmd/dispatcher

# When either process exits, the other is stopped; if it failed, make fails
# with its status and says what to change, from the status: 3, the
# dispatcher's data directory is held by another dispatcher (DATA); 4, a
# port is in use (the variables that choose that process's ports); 2, a
# command-line error; anything else, see its error above. A process that
# had already exited on its own when make run came to stop it is reported
# too; one make run stops is not, whatever its stop looked like (stopped in
# its start-up, it may end with an error of its own). A clean exit
# (both got the terminal's Ctrl-C) ends make cleanly. Needs bash for wait -n.
# SIGTERM, not SIGINT: a background job starts with SIGINT ignored, so a
# SIGINT sent before the process installed its handler would be lost; both
# processes stop cleanly on either (0; 143 if it came before the handler).
# mcp-front gets -create-db: both processes take their paths from DATA, so
# its -db is no mistyped path, and it may start before the dispatcher has
# created the ledger.
run: SHELL := bash
run: ## run both processes on DATA; ports: LISTEN, FRONT_METRICS, DISPATCHER_METRICS, NATS_LISTEN; Ctrl-C stops both; either one exiting stops the other
	@echo "make run: building bin/mcp-front and bin/dispatcher (the first build takes a minute or so)"
	@$(MAKE) --no-print-directory -s build
	@mkdir -p -m 700 '$(DATA)'
	@echo "make run: dispatcher (NATS $(NATS_LISTEN), metrics $(or $(DISPATCHER_METRICS),off), console http://127.0.0.1:9470/) and mcp-front (http://$(LISTEN)/mcp, metrics $(or $(FRONT_METRICS),off)) on $(DATA)/; Ctrl-C stops both"
	@trap 'kill -TERM $$d $$f 2>/dev/null; wait $$d $$f; exit 130' INT TERM; \
	 why() { case "$$1:$$2" in \
	   *:0|*:143) return ;; \
	   dispatcher:3) echo "make run: the dispatcher exited (status 3): another dispatcher holds the data directory $(DATA)/ (its pid is above); stop it, or run on another directory with DATA= (make run DATA=data2)" ;; \
	   dispatcher:4) echo "make run: the dispatcher exited (status 4): a port is in use (the flag is above); the dispatcher's ports are NATS_LISTEN and DISPATCHER_METRICS (make run NATS_LISTEN=127.0.0.1:4223)" ;; \
	   mcp-front:4) echo "make run: mcp-front exited (status 4): a port is in use (the flag is above); mcp-front's ports are LISTEN and FRONT_METRICS (make run LISTEN=127.0.0.1:8090)" ;; \
	   *:2) echo "make run: $$1 exited (status 2): its command line was refused (the reason is above)" ;; \
	   *) echo "make run: $$1 exited (status $$2); its error is above" ;; \
	 esac >&2; }; \
	 bin/dispatcher -data '$(DATA)' -nats-listen '$(NATS_LISTEN)' -metrics-listen '$(DISPATCHER_METRICS)' & d=$$!; \
	 bin/mcp-front -create-db -db '$(DATA)/tickets.db' -listen '$(LISTEN)' -metrics-listen '$(FRONT_METRICS)' & f=$$!; \
	 wait -n -p gone $$d $$f; rc=$$?; \
	 if [ "$$gone" = "$$d" ]; then gone=dispatcher other=mcp-front o=$$f; else gone=mcp-front other=dispatcher o=$$d; fi; \
	 [ $$rc -eq 0 ] || echo "make run: stopping $$other" >&2; \
	 if kill -0 $$o 2>/dev/null; then kill -TERM $$o; wait $$o; orc=0; else wait $$o; orc=$$?; fi; \
	 why $$gone $$rc; why $$other $$orc; \
	 exit $$rc

# Four steps, each announced on one line: what the suite needs (Go, a C
# compiler for -race, every module downloaded, staticcheck built:
# testkit/scripts/test-prereqs.sh installs gcc with apt-get as root, else says what
# to install), vet (go vet, staticcheck, gofmt), the main module's tests,
# the patched decoder's. go test's output goes through
# testkit/cmd/testprogress (a line per package, failing tests' output at once, the
# packages still running during a quiet stretch); pipefail keeps go test's
# own exit status as the step's.
# Packages tested at once. More than the cores: the longest packages
# (torture, the multi-host e2e, power cuts) spend most of their time
# waiting on processes, elections and timed loads, not on the CPU; on 2
# cores 4 at once took the suite from 11.5 to 8 minutes.
TEST_PACKAGES ?= 4
# The longest packages start first: go test starts packages in the order
# named, and ./... alone left the torture, the last of them, running by
# itself for its last three minutes.
TEST_FIRST := ./testkit/torture ./store/ledger ./testkit/e2e/multihost ./testkit/powercut

test: SHELL := bash
test: ## prerequisites checked first, then vet, staticcheck, gofmt and the whole suite with the race detector
	@GO='$(GO)' testkit/scripts/test-prereqs.sh
	@echo "make test [2/4]: go vet and staticcheck (ticketrelay, bench/noopserver, bench/riverbaseline) and gofmt"
	@$(MAKE) --no-print-directory vet
	@$(GO) build -o bin/ ./testkit/cmd/testprogress
	@echo "make test [3/4]: unit and integration tests with -race, every package of ticketrelay (8-15 min on 2 cores, depending on load; torture, e2e and testkit/powercut take longest)"
	set -o pipefail; $(GO) test -race -count=1 -p $(TEST_PACKAGES) -timeout 20m -json $(TEST_FIRST) ./... | bin/testprogress
	@echo "make test [4/4]: the patched JSON decoder (third_party/segmentio-encoding) with -race"
	cd third_party/segmentio-encoding && $(GO) test -race -count=1 ./... # a module of its own; upstream's code is not vetted
	@echo "make test: all steps passed"

test/short: ## quick run without the race detector
	$(GO) test -count=1 -short ./...

# staticcheck, pinned by testkit/tools/staticcheck's go.mod and go.sum (a tool
# directive in a module of its own: ticketrelay's go.mod carries none of its
# dependencies, and go tool caches the build). Its findings are fixed, or
# silenced where they stand with //lint:ignore CHECK and the reason.
STATICCHECK = $(GO) tool -modfile=$(CURDIR)/testkit/tools/staticcheck/go.mod staticcheck

vet:
	$(GO) vet ./...
	$(GO) vet -tags ticketrelay_notracing ./tracing/ ./cmd/... # the bench's control with tracing compiled out keeps building (decision 0164)
	cd bench/noopserver && $(GO) vet ./... # a module of its own: go-sdk's defaults, unpatched
	cd bench/riverbaseline && $(GO) vet ./... # a module of its own: River and its SQLite driver
	$(STATICCHECK) ./...
	cd bench/noopserver && $(STATICCHECK) ./...
	cd bench/riverbaseline && $(STATICCHECK) ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

lint: vet

test-redmine: build ## the redmine target against a real Redmine (installs Debian's redmine if missing: root)
	testkit/scripts/redmine-up.sh install
	TICKETRELAY_REDMINE=1 $(GO) test -race -count=1 -timeout 10m ./testkit/e2e/redmine/...

# Signing in against a real OAuth server: Ory Hydra, pinned by the module of
# its own in testkit/tools/hydra (its dependencies stay out of ours), built
# once per version into TOOLS_CACHE (the build takes minutes). Its in-memory
# store is SQLite through cgo, behind the sqlite build tag, as Ory builds it.
# Claude Code (CLAUDE_CODE_VERSION) is installed beside it by
# testkit/scripts/claude-code-install.sh, as for make test-docs.
TOOLS_CACHE   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ticketrelay
HYDRA_VERSION := $(shell awk '$$1 == "github.com/ory/hydra/v2" {print $$2; exit}' testkit/tools/hydra/go.mod)
HYDRA         := $(TOOLS_CACHE)/hydra-$(HYDRA_VERSION)/hydra
test-oauth: ## signing in against a real Ory Hydra: the go-sdk's OAuth client, and Claude Code (both installed once into TOOLS_CACHE)
	@test -x $(HYDRA) || { mkdir -p $(dir $(HYDRA)) && cd testkit/tools/hydra && \
		CGO_ENABLED=1 $(GO) build -tags sqlite,sqlite_omit_load_extension -o $(HYDRA) github.com/ory/hydra/v2; }
	@claude="$$(CLAUDE_CODE_VERSION='$(CLAUDE_CODE_VERSION)' CLAUDE_CODE_CACHE='$(TOOLS_CACHE)' testkit/scripts/claude-code-install.sh)" && \
	 TICKETRELAY_HYDRA=$(HYDRA) TICKETRELAY_CLAUDE="$$claude" $(GO) test -race -count=1 -timeout 10m ./testkit/e2e/oauth/...

# The operator console driven by a real headless Chromium (Debian's
# package) against a real dispatcher and fake webhook receivers: pages load
# without console errors, filters, a redrive and a resolve clicked through,
# a cross-site form refused, sign-in beyond loopback. It also takes the
# screenshots docs/operations.md shows (docs/img/console-*.png).
test-console: ## the operator console in a real headless Chromium (installs Debian's chromium if missing: root)
	testkit/scripts/chromium-install.sh
	TICKETRELAY_CONSOLE_BROWSER=1 $(GO) test -race -count=1 -timeout 5m -run 'TestConsole' ./internal/app/

# Every alert of deploy/prometheus/alerts.yml: promtool's checks and unit
# tests (alerts_test*.yml), then a real Prometheus scraping a real dispatcher
# (testkit/e2e/alerts), which fails here instead of skipping without prometheus.
# Traces from the agent's call to the downstream (issue 37) read back from a
# real Jaeger, pinned by the module of its own in testkit/tools/jaeger and built
# once per version into TOOLS_CACHE (minutes on 2 cores, cold).
JAEGER_VERSION := $(shell awk '$$1 == "github.com/jaegertracing/jaeger" {print $$2; exit}' testkit/tools/jaeger/go.mod)
JAEGER         := $(TOOLS_CACHE)/jaeger-$(JAEGER_VERSION)/jaeger
.PHONY: test-traces
test-traces: ## traces through mcp-front, the dispatcher and a downstream, read back from a real Jaeger (built once into TOOLS_CACHE)
	@test -x $(JAEGER) || { mkdir -p $(dir $(JAEGER)) && cd testkit/tools/jaeger && \
		CGO_ENABLED=0 $(GO) build -o $(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger; }
	TICKETRELAY_JAEGER=$(JAEGER) $(GO) test -race -count=1 -timeout 10m ./testkit/e2e/traces/... ./tracing/...

.PHONY: test-alerts
test-alerts: ## alert rules: promtool check and unit tests, and a real Prometheus (installs Debian's prometheus if missing: root)
	testkit/scripts/prometheus-install.sh
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test*.yml
	TICKETRELAY_PROMETHEUS=1 $(GO) test -race -count=1 -timeout 5m ./testkit/e2e/alerts/...

# A dispatcher against the nats-server of Debian's package (2.9.10 on Debian
# 12) run as its own process: refused at the first start, with one line,
# when the server is older than 2.10, and the way on from a stream such a
# server left without marks (docs/decisions/0105).
.PHONY: test-debian-nats
test-debian-nats: ## a dispatcher against Debian's nats-server (installs Debian's nats-server if missing: root)
	bin=$$(testkit/scripts/debian-nats-install.sh) && \
	TICKETRELAY_DEBIAN_NATS=$$bin $(GO) test -race -count=1 -run TestDebianNATSServer ./delivery/natsjs/ && \
	TICKETRELAY_DEBIAN_NATS=$$bin $(GO) test -race -count=1 -timeout 10m ./testkit/e2e/debiannats/...

# Every command line the docs give a user, run as written (docs/commands_test.go):
# the README's curl session and webhook walkthrough against mcp-front and a
# dispatcher (these two also in make test); every `claude mcp add` /
# `claude mcp get` line of README.md and docs/*.md against the real Claude
# Code CLI, pinned here and installed once into a cache directory outside
# the repository (testkit/scripts/claude-code-install.sh; ~400 MB); and make
# run-cluster's printed steps against its script (decision 0126).
.PHONY: test-docs
test-docs: ## the docs' command lines: curl session, webhook walkthrough, run-cluster's steps, every claude mcp add/get line against Claude Code $(CLAUDE_CODE_VERSION) (installed once into ~/.cache/ticketrelay)
	@claude="$$(CLAUDE_CODE_VERSION='$(CLAUDE_CODE_VERSION)' CLAUDE_CODE_CACHE='$(TOOLS_CACHE)' testkit/scripts/claude-code-install.sh)" && \
	 echo "make test-docs: $$("$$claude" --version)" && \
	 TICKETRELAY_CLAUDE_CODE="$$claude" TICKETRELAY_RUN_CLUSTER=1 $(GO) test -race -count=1 -timeout 10m ./docs/...

interop: build ## conformance suite (sessions and -stateless), MCP Inspector CLI (HTTP, stdio), strict 1,000-call stdio test
	BIN=$(CURDIR)/bin bash testkit/interop/run.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

bench: build ## benchmark table vs same-run baselines (a few minutes; BENCH_QUICK=1: ~1 minute); writes bench/results/
	$(BUILD) -o bin/ ./testkit/cmd/loadgen ./bench/profwrap github.com/nats-io/nats-server/v2 # scenario 9's cluster nodes
	cd bench/noopserver && $(BUILD) -o $(CURDIR)/bin/ .
	$(BUILD) -o bin/ ./bench/receiver
	cd bench/riverbaseline && $(BUILD) -o $(CURDIR)/bin/ . # River: a module of its own
	bin/loadgen -bin bin -out bench/results -version $(VERSION) $(if $(filter 1,$(BENCH_QUICK)),-quick) $(BENCH_FLAGS)

clean:
	rm -rf bin

# Fault-injection run (testkit/torture/): kills the processes and the fakes misbehave
# while callers retry; then checks the history. Prints one line per property,
# the counts and the seed; SEED=N replays a seed's decisions.
SEED              ?= 0
TORTURE_DURATION  ?= 3m
TORTURE_CALLERS   ?= 6
TORTURE_FLAGS     ?=
.PHONY: torture
torture: ## long fault-injection run (TORTURE_DURATION=3m, SEED=N, TORTURE_CALLERS=6, TORTURE_FLAGS=...)
	$(BUILD) -ldflags '$(LDFLAGS)' -o bin/ ./cmd/mcp-front ./cmd/dispatcher ./testkit/cmd/torture
	$(BUILD) -o bin/nats-server github.com/nats-io/nats-server/v2
	bin/torture -front bin/mcp-front -dispatcher bin/dispatcher -nats-server bin/nats-server \
		-duration $(TORTURE_DURATION) -seed $(SEED) -callers $(TORTURE_CALLERS) $(TORTURE_FLAGS)

# The same run with power cuts (issue 24): data and JetStream store on a FUSE
# mount (root, /dev/fuse), every process SIGKILLed together and the mount cut.
# TORTURE_FLAGS=-powercut-lazy-nats runs it against a nats-server without
# sync_interval: always: stream-durable must FAIL there, everything else PASS.
.PHONY: torture-powercut
torture-powercut: ## power-cut run of the whole system (root, /dev/fuse; same variables as torture)
	$(MAKE) torture TORTURE_FLAGS='-powercut $(TORTURE_FLAGS)'

.PHONY: torture-multihost
torture-multihost: ## long multi-host runs: 3 hosts on a 3-node NATS cluster behind a proxy, one lost for good; then NATS node faults only (torture's variables)
	$(MAKE) torture TORTURE_FLAGS='-hosts 3 $(TORTURE_FLAGS)'
	$(MAKE) torture TORTURE_FLAGS='-hosts 3 -node-faults-only -host-dead-after 15s $(TORTURE_FLAGS)'

# A multi-host installation on loopback (testkit/scripts/run-cluster.sh): 3 NATS
# nodes and two hosts A and B (each a dispatcher + mcp-front + SQLite file
# under CLUSTER_DATA/host-x, -multi-host -installation CLUSTER_NAME), both
# delivering to one webhook receiver (examples/webhook-receiver on
# CLUSTER_RECEIVER). It prints both MCP URLs and how to kill a host and
# watch no ticket be lost; Ctrl-C stops everything, and each run starts
# from an empty CLUSTER_DATA. The NATS ports are chosen at run time
# (printed); each host's dispatcher serves metrics on the port after its
# front's.
CLUSTER_DATA       ?= data-cluster
CLUSTER_NAME       ?= demo
CLUSTER_LISTEN_A   ?= 127.0.0.1:8081
CLUSTER_LISTEN_B   ?= 127.0.0.1:8082
CLUSTER_METRICS_A  ?= 127.0.0.1:9466
CLUSTER_METRICS_B  ?= 127.0.0.1:9468
CLUSTER_DEAD_AFTER ?= 15s
CLUSTER_RECEIVER   ?= 127.0.0.1:9001
.PHONY: run-cluster
run-cluster: build ## 3 NATS nodes and two hosts of one installation on loopback; kill a host, lose no ticket (CLUSTER_DATA=data-cluster, CLUSTER_LISTEN_A/B, ...)
	$(BUILD) -o bin/ ./testkit/cmd/natscluster ./examples/webhook-receiver
	$(BUILD) -o bin/nats-server github.com/nats-io/nats-server/v2
	CLUSTER_DATA='$(CLUSTER_DATA)' CLUSTER_NAME='$(CLUSTER_NAME)' CLUSTER_LISTEN_A='$(CLUSTER_LISTEN_A)' \
	CLUSTER_LISTEN_B='$(CLUSTER_LISTEN_B)' CLUSTER_METRICS_A='$(CLUSTER_METRICS_A)' CLUSTER_METRICS_B='$(CLUSTER_METRICS_B)' \
	CLUSTER_DEAD_AFTER='$(CLUSTER_DEAD_AFTER)' CLUSTER_RECEIVER='$(CLUSTER_RECEIVER)' BIN=bin testkit/scripts/run-cluster.sh
