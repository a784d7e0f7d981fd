# Supervisor — two commands do all the set-up on a fresh machine:
#   make run    the embedded default: a demo workflow end to end, nothing installed
#   make test   golangci-lint, then the whole suite against real NATS, Redis (installed if missing) and git
#   make help   every target with its one-line description
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
PKGS  := ./shared/... ./coordinator/... ./worker/... ./gaterunner/...
MODULES := shared coordinator worker gaterunner
export GOTOOLCHAIN := local

# golangci-lint, pinned: `make lint` installs this version into bin/ when bin/ has
# no golangci-lint or another version of it.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint

.PHONY: all help build run dev lint test test-images test-unit test-e2e fuzz bench vet fmt clean

## all: the default target, the same as build
all: build

## help: every target with its one-line description (the `## target: ...` comments of this Makefile)
help:
	@awk 'match($$0, /^## [A-Za-z0-9_-]+: /) { printf "  %-14s %s\n", substr($$0, 4, RLENGTH - 5), substr($$0, RLENGTH + 1) }' $(MAKEFILE_LIST)

## build: the three binaries, the scripted test agent, the Docker sandbox's static helper and a nats-server built from its Go module
build:
	@mkdir -p $(BIN)
	cd coordinator && $(GO) build -o $(BIN)/coordinator ./cmd/coordinator
	cd coordinator && $(GO) build -o $(BIN)/supervisor-bench ./cmd/supervisor-bench
	cd worker && $(GO) build -o $(BIN)/worker ./cmd/worker
	cd gaterunner && $(GO) build -o $(BIN)/gaterunner ./cmd/gaterunner
	cd gaterunner && $(GO) build -o $(BIN)/supervisor-coverage-check ./cmd/supervisor-coverage-check
	cd worker && $(GO) build -o $(BIN)/supervisor-test-agent ./cmd/supervisor-test-agent
	cd shared && $(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2
	cd shared && CGO_ENABLED=0 $(GO) build -o $(BIN)/supervisor-sandbox-helper ./sandbox/cmd/supervisor-sandbox-helper

## run: the demo — embedded NATS, coordinator, worker and gate runner in one process; it prints the dashboard's URL (127.0.0.1:7070)
run: build
	$(BIN)/coordinator demo --agent-dir $(BIN)

## dev: the embedded default as a long-running service on 127.0.0.1:4222, its dashboard on http://127.0.0.1:7070/
dev: build
	$(BIN)/coordinator dev --sandbox-path $(BIN):$$(dirname $$(command -v go)):/usr/local/bin:/usr/bin:/bin

## lint: golangci-lint with .golangci.yml in each module (shared, coordinator, worker, gaterunner)
lint:
	@if ! $(GOLANGCI_LINT) version 2>/dev/null | grep -q 'has version $(GOLANGCI_LINT_VERSION:v%=%) '; then \
	  echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into bin/"; \
	  GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) || exit 1; \
	fi
	@# every module is linted even when an earlier one has findings; the exit status reports any
	@status=0; for m in $(MODULES); do \
	  (cd $$m && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || status=1; \
	done; exit $$status

## test: lint and the images at once, then every test, with a redis-server of our own and Chromium for the dashboard's browser test (each installed from Debian's packages if missing), and every fuzz target run briefly
test:
	@# the lint (CPU) and the images (mostly Docker and Debian's packages) overlap;
	@# each one's output is shown whole when it ends
	$(MAKE) --no-print-directory -j2 --output-sync=target lint test-images
	scripts/ensure-chromium.sh
	scripts/with-redis.sh $(MAKE) --no-print-directory test-unit test-e2e
	$(MAKE) --no-print-directory fuzz

## fuzz: every fuzz target of a parser that takes outside input (FUZZ_TARGETS: workflow and gate files, task front matter, the shell detector, git's index, git status -z, patch stats, path globs, jobs, reports and events off the bus (and that they read as encoding/json would), the agent CLIs' output, the JSON block extractor, context strategies, the egress proxy's requests and allow-list, the redactor, branch names (against git's own check), feature descriptions), FUZZTIME each (default 5s; `make fuzz FUZZTIME=5m` to run longer)
FUZZTIME ?= 5s
FUZZ_TARGETS = \
	shared/agentcli:FuzzClaudeStream shared/agentcli:FuzzClaudeJSON shared/agentcli:FuzzCodex \
	shared/agentcli:FuzzGeminiStream shared/agentcli:FuzzGeminiJSON \
	shared/agentoutput:FuzzExtract \
	shared/contextpack:FuzzParseFile \
	shared/egress:FuzzConnect shared/egress:FuzzAllowList \
	shared/gates:FuzzParseFile shared/gates:FuzzFrontMatter shared/gates:FuzzShellCommand \
	shared/gitindex:FuzzParse \
	shared/integrity:FuzzParseStatusZ \
	shared/patchstat:FuzzParse \
	shared/pathglob:FuzzMatch shared/pathglob:FuzzOverlapConservative \
	shared/protocol:FuzzDecode shared/protocol/eventlog:FuzzDecode shared/protocol/eventlog:FuzzDecodeAll \
	shared/protocol:FuzzDecodeAgreesWithEncodingJSON shared/protocol/eventlog:FuzzDecodeAgreesWithEncodingJSON \
	shared/redact:FuzzRedact \
	shared/protocol:FuzzCheckBranchNameAgreesWithGit \
	coordinator/internal/templates:FuzzFeature \
	coordinator/internal/workflow:FuzzParse
fuzz:
	@# one target at a time: -fuzz takes a single target of a single package.
	@# Go's fuzzing engine sometimes ends a run with its own "context deadline
	@# exceeded" while stopping its workers at -fuzztime, having found nothing
	@# (no failing input written): that target is run once more.
	@out=$$(mktemp); for t in $(FUZZ_TARGETS); do \
	  cmd="$(GO) test ./$${t%%:*}/ -run ^$$ -fuzz ^$${t#*:}$$ -fuzztime $(FUZZTIME) -fuzzminimizetime 2s"; \
	  echo "$$cmd"; $$cmd > $$out 2>&1; rc=$$?; cat $$out; \
	  if [ $$rc -ne 0 ]; then \
	    if grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
	      echo "fuzz: $$t ended on the fuzzing engine's deadline error, no crash found; running it again"; \
	      $$cmd || { rm -f $$out; exit 1; }; \
	    else rm -f $$out; exit 1; fi; \
	  fi; \
	done; rm -f $$out

# test-images: the images test-unit and test-e2e need, when a Docker engine answers
test-images:
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; fi

# SLOW_PKGS: the packages whose tests take longest (minutes, under -race on
# two cores), longest first; test-unit starts them first
SLOW_PKGS = ./coordinator/internal/bench ./shared/sandbox ./gaterunner ./shared/gatecache \
	./coordinator/internal/engine ./coordinator/internal/cli ./shared/feedback ./shared/integrity \
	./worker ./shared/workspace ./coordinator/internal/dashboard

## test-unit: each binary built without go.work, go vet, and every package's tests but the e2e ones (race detector on)
test-unit:
	@# the Docker sandbox's real-Go cache test needs supervisor/sandbox-go
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; fi
	@# each binary builds on its own module too, without go.work
	for m in coordinator worker gaterunner; do (cd $$m && GOWORK=off $(GO) build -o /dev/null ./cmd/$$m) || exit 1; done
	$(GO) vet $(PKGS)
	@# the slowest packages first: go test builds and runs packages in the
	@# order given, two at a time on two cores, and these, left where go list
	@# puts them, start last and run alone at the end
	slow=$$($(GO) list $(SLOW_PKGS)) && \
	$(GO) test -race -count=1 -timeout 15m $$slow $$($(GO) list $(PKGS) | grep -v /e2e | grep -vxF "$$slow")

## test-e2e: the multi-process end-to-end tests (coordinator/e2e), the Compose ones and the chaos suite included
# The Compose tests (coordinator/e2e/compose_test.go) need the images: they are
# built first, outside the tests' timeout, when a Docker engine answers. The
# chaos suite (TestChaos, about 5 minutes) is part of them.
test-e2e:
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; fi
	$(GO) test -count=1 -timeout 25m ./coordinator/e2e/...

## bench: `coordinator bench` — throughput, latency, CPU and memory against references measured in the same run (BENCH_FLAGS passes flags, e.g. BENCH_FLAGS="--scenarios coordinator --cpuprofile cpu.prof")
# The sandbox image is built first when a Docker engine answers.
bench: build
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; fi
	$(BIN)/coordinator bench $(BENCH_FLAGS)

## vet: go vet on every package
vet:
	$(GO) vet $(PKGS)

## fmt: gofmt -w on every module
fmt:
	gofmt -w shared coordinator worker gaterunner

## clean: remove bin/ (golangci-lint included: the next make lint installs it again)
clean:
	rm -rf $(BIN)

# ---- container images and the Compose fleet --------------------------------
# `docker compose` (v2) when the CLI has it, else docker-compose (1.29 works).
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_FILE_FLAGS ?= -f compose.yaml
COMPOSE_UP_FLAGS ?=
# COMPOSE_SANDBOX=docker adds compose.docker-sandbox.yaml: workers and gate runners run
# agents and gates in Docker sandboxes on this engine (the socket is mounted), working in
# SUPERVISOR_SANDBOX_DATA_DIR, a host directory owned by the runners' uid 10001.
COMPOSE_SANDBOX ?= process
ifeq ($(COMPOSE_SANDBOX),docker)
COMPOSE_FILE_FLAGS += -f compose.docker-sandbox.yaml
export SUPERVISOR_SANDBOX_DATA_DIR ?= $(CURDIR)/.data/compose-sandbox
export SUPERVISOR_DOCKER_GID ?= $(shell stat -c %g /var/run/docker.sock 2>/dev/null)
endif

# The Compose fleet's credentials (NATS nkeys per role, made by `coordinator creds
# init`; TLS certificates and Redis users, made by scripts/compose-creds.sh):
# made by compose-creds when missing and kept (git-ignored), mounted into the
# services by compose.yaml, used by compose-demo. The host's CLI uses cli.nk and tls/cli.
export SUPERVISOR_CREDS_DIR ?= $(CURDIR)/.data/compose-creds
COMPOSE_CLI_TLS = --nats-ca $(SUPERVISOR_CREDS_DIR)/tls/cli/ca.crt --nats-cert $(SUPERVISOR_CREDS_DIR)/tls/cli/cli.crt --nats-key $(SUPERVISOR_CREDS_DIR)/tls/cli/cli.key

.PHONY: images compose-creds compose-up compose-demo compose-down test-compose chaos

## images: supervisor/{coordinator,worker,gaterunner,nats,redis,prometheus,sandbox-base,sandbox-go}, built locally (nothing pulled)
# They are built from our static binaries and Debian's packages; unchanged inputs are skipped.
images:
	GO="$(GO)" deploy/images/build.sh

## compose-creds: make the Compose fleet's credentials in SUPERVISOR_CREDS_DIR (.data/compose-creds) unless it has them: NATS keys, TLS certificates, Redis users
# The coordinator's and runners' keys are chown'd to their containers' uid 10001
# (in a container: no sudo); cli.nk and operator.nk stay this user's.
compose-creds: build images
	@if [ ! -f "$(SUPERVISOR_CREDS_DIR)/nats-auth.conf" ]; then $(BIN)/coordinator creds init "$(SUPERVISOR_CREDS_DIR)"; fi
	docker run --rm --network none --user 0 --entrypoint chown -v "$(SUPERVISOR_CREDS_DIR):/d" supervisor/sandbox-base:latest \
	  10001:10001 /d/coordinator.nk /d/worker.nk /d/gaterunner.nk
	scripts/compose-creds.sh "$(SUPERVISOR_CREDS_DIR)" "$(BIN)/coordinator"

## compose-up: build the images, make the credentials if missing, start compose.yaml's fleet (NATS with credentials over TLS, Redis on TLS with a user per service) and wait for the coordinator
# make compose-up COMPOSE_UP_FLAGS="--scale worker=4 --scale gaterunner=3"; COMPOSE_SANDBOX=docker: gates in Docker sandboxes
compose-up: images compose-creds
ifeq ($(COMPOSE_SANDBOX),docker)
	@# the runners' data directory on this host, owned by their uid (chown'd in a container: no sudo)
	mkdir -p "$(SUPERVISOR_SANDBOX_DATA_DIR)"
	docker run --rm --network none --user 0 --entrypoint chown -v "$(SUPERVISOR_SANDBOX_DATA_DIR):/d" supervisor/sandbox-base:latest 10001:10001 /d
endif
	$(COMPOSE) $(COMPOSE_FILE_FLAGS) up -d $(COMPOSE_UP_FLAGS)
	@for i in $$(seq 1 90); do \
	  id=$$($(COMPOSE) $(COMPOSE_FILE_FLAGS) ps -q coordinator); \
	  [ "$$(docker inspect -f '{{.State.Health.Status}}' $$id 2>/dev/null)" = healthy ] && break; \
	  sleep 2; \
	done; \
	$(COMPOSE) $(COMPOSE_FILE_FLAGS) ps; \
	port=$$($(COMPOSE) $(COMPOSE_FILE_FLAGS) port nats-1 4222); \
	echo "NATS at tls://$$port — make compose-demo runs the demo workflow on it; or bin/coordinator submit WORKFLOW --repo REPO --nats tls://$$port --nats-nkey $(SUPERVISOR_CREDS_DIR)/cli.nk $(COMPOSE_CLI_TLS) --wait"; \
	echo "Prometheus at http://$$($(COMPOSE) $(COMPOSE_FILE_FLAGS) port prometheus 9090) (the fleet's metrics: docs/metrics.md)"

## compose-demo: submit the demo workflow (make run's) to the fleet compose-up started
compose-demo: build
	$(BIN)/coordinator demo --fleet --nats-nkey "$(SUPERVISOR_CREDS_DIR)/cli.nk" $(COMPOSE_CLI_TLS) \
	  --nats tls://$$($(COMPOSE) $(COMPOSE_FILE_FLAGS) port nats-1 4222 | sed 's/^0.0.0.0:/127.0.0.1:/')

## compose-down: stop and remove the fleet's containers and network (volumes stay: docker-compose -f compose.yaml down -v)
compose-down:
	$(COMPOSE) $(COMPOSE_FILE_FLAGS) down --remove-orphans

## test-compose: only the Compose tests (make test runs them too, in test-e2e)
test-compose: images
	$(GO) test -count=1 -timeout 15m -run 'TestCompose' -v ./coordinator/e2e/

## chaos: the chaos suite on the Compose fleet (docs/reliability.md): a NATS node stopped, Redis's data lost, runners cut off the network, the leading coordinator killed, a runner's disk full; each scenario prints what it measured
chaos: images
	$(GO) test -count=1 -timeout 30m -run '^TestChaos$$' -v ./coordinator/e2e/
