# Supervisor — two commands do all the set-up on a fresh machine:
#   make run    the embedded default: a demo workflow end to end, nothing installed
#   make test   the whole suite against real NATS, Redis (installed if missing) and git
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
PKGS  := ./shared/... ./coordinator/... ./worker/... ./gaterunner/...
export GOTOOLCHAIN := local

.PHONY: all build run dev test test-unit test-e2e bench vet fmt clean

all: build

## build: the three binaries, the scripted test agent and a nats-server built from its Go module
build:
	@mkdir -p $(BIN)
	cd coordinator && $(GO) build -o $(BIN)/coordinator ./cmd/coordinator
	cd worker && $(GO) build -o $(BIN)/worker ./cmd/worker
	cd gaterunner && $(GO) build -o $(BIN)/gaterunner ./cmd/gaterunner
	cd gaterunner && $(GO) build -o $(BIN)/supervisor-coverage-check ./cmd/supervisor-coverage-check
	cd worker && $(GO) build -o $(BIN)/supervisor-test-agent ./testdata/testagent
	cd shared && $(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

## run: the demo — embedded NATS, coordinator, worker and gate runner in one process
run: build
	$(BIN)/coordinator demo --agent-dir $(BIN)

## dev: the embedded default as a long-running service on 127.0.0.1:4222
dev: build
	$(BIN)/coordinator dev --sandbox-path $(BIN):$$(dirname $$(command -v go)):/usr/local/bin:/usr/bin:/bin

## test: every test, with a redis-server of our own (installed from Debian's packages if missing)
test:
	scripts/with-redis.sh $(MAKE) --no-print-directory test-unit test-e2e

test-unit:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list $(PKGS) | grep -v /e2e)

test-e2e:
	$(GO) test -count=1 -timeout 15m ./coordinator/e2e/...

## bench: throughput and latency against raw JetStream measured in the same run
bench: build
	$(BIN)/coordinator bench

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w shared coordinator worker gaterunner

clean:
	rm -rf $(BIN)
