# Berth — the two commands are `make run` and `make test`; the rest are their parts.
SHELL := /bin/bash
GO ?= go
PKG := github.com/berth-agent/berth
BIN := bin/berth
RUN_DIR := $(CURDIR)/.run
GIT_HASH := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X $(PKG)/agent/version.GitHash=$(GIT_HASH)
# Tests never talk to a real instance metadata service.
export AWS_EC2_METADATA_DISABLED := true

.PHONY: all build run test unit integration provision lint fmt vet clean bench

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./agent/cmd/berth

provision:
	BERTH_RUN_DIR=$(RUN_DIR) bash scripts/provision.sh

# Runs the agent in local mode with its data and logs under .run/ until SIGTERM or Ctrl-C.
run: provision build
	mkdir -p $(RUN_DIR)/data $(RUN_DIR)/log
	ECS_DATADIR=$(RUN_DIR)/data ECS_LOGFILE=$(RUN_DIR)/log/berth.log \
		ECS_ENV_FILE=$${ECS_ENV_FILE:-misc/examples/run.env} \
		exec $(BIN) agent

# Every test: provisioning, then unit and integration tests (with the fuzz seed corpora) under -race.
test: provision lint
	$(GO) test -race -count=1 -tags integration -timeout 15m ./...

# Berth against the bare Docker Engine, side by side in one run; prints ratios.
bench: provision
	$(GO) run ./scripts/bench

# Unit tests only: no Docker, no root.
unit:
	$(GO) test -race -count=1 ./...

lint: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go') agent); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./...

clean:
	rm -rf bin
