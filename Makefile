# Berth — the two commands are `make run` and `make test`; the rest are their parts.
SHELL := /bin/bash
GO ?= go
PKG := github.com/berth-agent/berth
BIN := bin/berth
RUN_DIR := $(CURDIR)/.run
CNI_PLUGINS_DIR := $(RUN_DIR)/cni-plugins
# The Go tools the targets run, pinned, fetched through the Go module proxy like any module and
# built once into a directory of their version (make tools).
TOOLS_DIR := $(RUN_DIR)/tools
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(TOOLS_DIR)/staticcheck@$(STATICCHECK_VERSION)/staticcheck
NFPM_VERSION := v2.45.2
NFPM := $(TOOLS_DIR)/nfpm@$(NFPM_VERSION)/nfpm
GIT_HASH := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The version bin/berth reports and the packages carry: a release tag vX.Y.Z on HEAD, else the Version
# of agent/version/version.go, else 0.0.0-dev. `make packages BERTH_VERSION=1.2.3` overrides it.
BERTH_VERSION ?= $(or $(patsubst v%,%,$(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null)),$(shell sed -n 's/^var Version = "\(.*\)"$$/\1/p' agent/version/version.go 2>/dev/null),0.0.0-dev)
BERTH_VERSION := $(BERTH_VERSION)
LDFLAGS := -X $(PKG)/agent/version.Version=$(BERTH_VERSION) -X $(PKG)/agent/version.GitHash=$(GIT_HASH)
PACKAGES_DIR := bin/packages
# Tests never talk to a real instance metadata service.
export AWS_EC2_METADATA_DISABLED := true

.PHONY: all build run test unit integration provision images exec-deps cni-plugins ec2-metadata-mock jsclients tools packages packages-test lint fmt vet staticcheck damage-sweeps clean bench fuzz soak

all: build

# A static binary: no cgo, no libc mapped into the agent (about 1.5 MiB less resident memory).
# Every build but the race detector's (which needs cgo) is made the same way, so that the standard
# library and the modules are compiled once for bin/berth, the tools, the test images, vet and
# staticcheck alike: CGO_ENABLED=0 and no -trimpath.
PLAIN := CGO_ENABLED=0
build:
	$(PLAIN) $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./agent/cmd/berth

provision:
	BERTH_RUN_DIR=$(RUN_DIR) bash scripts/provision.sh

tools: $(STATICCHECK) $(NFPM)

$(STATICCHECK):
	$(PLAIN) GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(NFPM):
	$(PLAIN) GOBIN=$(dir $@) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# Test images (FROM scratch + static binaries from misc/), pushed to the local registry; the pause
# image is also saved to .run/images/pause.tar. Skips what is unchanged.
images: provision
	BERTH_RUN_DIR=$(RUN_DIR) GO=$(GO) bash scripts/build-images.sh

# A test dependencies directory for ECS Exec (ECS_EXEC_DEPS_DIR), never the real
# /var/lib/ecs/deps: misc/ssmstandin built static as the three SSM agent binaries of version 3.0.0.0,
# and a stand-in CA bundle.
EXEC_DEPS_DIR := $(RUN_DIR)/exec-deps
exec-deps:
	install -d -m 0700 $(EXEC_DEPS_DIR)/bin/3.0.0.0 $(EXEC_DEPS_DIR)/certs
	$(PLAIN) $(GO) build -buildvcs=false -ldflags '-s -w' -o $(EXEC_DEPS_DIR)/bin/3.0.0.0/amazon-ssm-agent ./misc/ssmstandin
	install -m 0700 $(EXEC_DEPS_DIR)/bin/3.0.0.0/amazon-ssm-agent $(EXEC_DEPS_DIR)/bin/3.0.0.0/ssm-agent-worker
	install -m 0700 $(EXEC_DEPS_DIR)/bin/3.0.0.0/amazon-ssm-agent $(EXEC_DEPS_DIR)/bin/3.0.0.0/ssm-session-worker
	printf 'stand-in CA bundle for ECS Exec tests\n' >$(EXEC_DEPS_DIR)/certs/tls-ca-bundle.pem && chmod 0600 $(EXEC_DEPS_DIR)/certs/tls-ca-bundle.pem

# The pinned CNI reference plugins awsvpc tasks run (go install ...@version); skips what is built.
cni-plugins:
	GO=$(GO) bash scripts/build-cni-plugins.sh $(CNI_PLUGINS_DIR)

# Runs the agent in local mode with its data and logs under .run/ until SIGTERM or Ctrl-C.
# The example static tasks are copied to a directory the agent accepts whatever the checkout's owner
# and umask: owned by root, not writable by group or others.
run: images build cni-plugins
	mkdir -p $(RUN_DIR)/data $(RUN_DIR)/log
	rm -rf $(RUN_DIR)/tasks.d && install -d -m 0755 $(RUN_DIR)/tasks.d && install -m 0644 misc/examples/tasks.d/*.json $(RUN_DIR)/tasks.d/
	@echo "AWS CLI against the embedded control plane (as root; the agent writes the keys file at start):"
	@echo "  AWS_SHARED_CREDENTIALS_FILE=$(RUN_DIR)/data/local-credentials AWS_PROFILE=berth aws ecs list-tasks --endpoint-url http://127.0.0.1:51677 --region us-east-1"
	ECS_DATADIR=$(RUN_DIR)/data ECS_LOGFILE=$(RUN_DIR)/log/berth.log \
		ECS_ENV_FILE=$${ECS_ENV_FILE:-misc/examples/run.env} ECS_STATIC_TASKS_DIR=$${ECS_STATIC_TASKS_DIR:-$(RUN_DIR)/tasks.d} \
		ECS_ENABLE_TASK_ENI=true ECS_CNI_PLUGINS_PATH=$(CNI_PLUGINS_DIR) ECS_PAUSE_IMAGE_TARBALL=$(RUN_DIR)/images/pause.tar \
		exec $(BIN) agent

# The JavaScript clients the integration tests run against real task endpoints (misc/jsclients): the
# versions pinned in its package-lock.json, from the npm registry.
jsclients:
	cd misc/jsclients && npm ci --no-audit --no-fund --loglevel=error

# The .deb and the .rpm (packaging/nfpm.yaml) in bin/packages: the binary, the systemd unit
# (misc/berth.service), the CNI plugins, the pause image, /etc/ecs/ecs.config and the agent's directories.
packages: build images cni-plugins $(NFPM)
	rm -rf $(PACKAGES_DIR) && mkdir -p $(PACKAGES_DIR)
	for format in deb rpm; do \
		BERTH_VERSION=$(BERTH_VERSION) BERTH_ARCH=$$($(GO) env GOARCH) $(NFPM) package \
			--config packaging/nfpm.yaml --packager $$format --target $(PACKAGES_DIR)/ || exit 1; \
	done

# Installs the .deb on this host (root), checks its files, modes, unit (systemd-analyze verify) and
# binary, removes and purges it, and checks the .rpm's contents with rpm -qlp (scripts/packages-test.sh).
packages-test: packages
	bash scripts/packages-test.sh $(PACKAGES_DIR) $(BERTH_VERSION)

# Every test: provisioning, lint, the package test, the state files' damage sweeps in full (without
# -race, whose children cost twenty times more: under it they run a sample), then unit and
# integration tests (with the fuzz seed corpora) under -race, in parallel where they can be, with the
# time of each phase printed (scripts/test.sh).
test:
	MAKE=$(MAKE) GO=$(GO) BERTH_RUN_DIR=$(RUN_DIR) bash scripts/test.sh

# Berth against the bare Docker Engine, side by side in one run; prints ratios. One section alone:
# go run ./scripts/bench -only ecs (pull, engine, memory, awsvpc, cp, ecs, endpoint; see scripts/bench/main.go).
bench: images cni-plugins
	BERTH_CNI_PLUGINS=$(CNI_PLUGINS_DIR) $(GO) run ./scripts/bench

# The chaos soak (10 minutes; SOAK_FLAGS="-duration 30m" to change it): the real agent SIGKILLed and
# restarted, dockerd restarted twice, control-plane connections cut, while tasks come and go; prints a
# table and fails when a row that must be 0 is not. Not part of test, which runs a one-minute version.
soak: images
	$(GO) run ./scripts/soak $(SOAK_FLAGS)

# Unit tests only: no Docker, no root.
unit:
	$(GO) test -race -count=1 ./...

# Every fuzz target of the repository (each func FuzzXxx in a *_test.go file, found by grep, so new
# ones are picked up), one after the other, FUZZTIME each. Their seed corpora run in every go test; a
# failing input is saved under the package's testdata/fuzz to become a seed.
FUZZTIME ?= 30s

fuzz:
	@set -e; for file in $$(grep -rl --include='*_test.go' --exclude-dir=.git --exclude-dir=.run '^func Fuzz' . | sort); do \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$file"); do \
			echo "$(GO) test -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME) $$(dirname "$$file")"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$(dirname "$$file")"; \
		done; \
	done

lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l agent misc scripts); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# With the integration tag every file is checked (no file is built only without it); vet without
# it as well, because that build of the tests is the one `go test ./...` compiles.
vet:
	$(PLAIN) $(GO) vet -tags integration ./...
	$(PLAIN) $(GO) vet ./...

staticcheck: $(STATICCHECK)
	$(PLAIN) $(STATICCHECK) -tags integration ./...

# The state files' damage sweeps in full: every case, which under -race only a sample is.
damage-sweeps:
	$(PLAIN) $(GO) test -count=1 -run DamageSweep ./agent/state/ ./agent/localcp/

clean:
	rm -rf bin

# AWS's instance metadata mock, pinned, for agent/cmd/berth's EC2 identity integration test (go install; quick when cached).
ec2-metadata-mock:
	$(PLAIN) $(GO) install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v1.13.0
