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

.PHONY: all build run test unit integration provision images lint fmt vet clean bench

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./agent/cmd/berth

provision:
	BERTH_RUN_DIR=$(RUN_DIR) bash scripts/provision.sh

# Test images (FROM scratch + static binaries from misc/), pushed to the local registry; the pause
# image is also saved to .run/images/pause.tar. Skips what is unchanged.
images: provision
	BERTH_RUN_DIR=$(RUN_DIR) GO=$(GO) bash scripts/build-images.sh

# Runs the agent in local mode with its data and logs under .run/ until SIGTERM or Ctrl-C.
run: images build
	mkdir -p $(RUN_DIR)/data $(RUN_DIR)/log
	ECS_DATADIR=$(RUN_DIR)/data ECS_LOGFILE=$(RUN_DIR)/log/berth.log \
		ECS_ENV_FILE=$${ECS_ENV_FILE:-misc/examples/run.env} ECS_STATIC_TASKS_DIR=$${ECS_STATIC_TASKS_DIR:-misc/examples/tasks.d} \
		exec $(BIN) agent

# Every test: provisioning, then unit and integration tests (with the fuzz seed corpora) under -race.
# Packages run one at a time (-p 1): one integration test restarts the Docker Engine.
test: images lint
	$(GO) test -race -count=1 -tags integration -p 1 -timeout 20m ./...

# Berth against the bare Docker Engine, side by side in one run; prints ratios.
bench: images
	$(GO) run ./scripts/bench

# Unit tests only: no Docker, no root.
unit:
	$(GO) test -race -count=1 ./...

lint: fmt vet

fmt:
	@out=$$(gofmt -l agent misc scripts); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./...

clean:
	rm -rf bin
