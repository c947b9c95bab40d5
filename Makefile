# Flotilla: `make demo` runs a hub and agents on this machine; `make test`
# checks everything. Both install what they need (as root, from Debian).
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X flotilla.dev/flotilla/internal/version.Version=$(VERSION) -X flotilla.dev/flotilla/internal/version.Commit=$(COMMIT)
BIN := bin
# Build tags of every binary (internal/buildtags says why; its test checks
# that this, packaging/build.sh and .goreleaser.yaml agree).
TAGS := grpcnotrace
# Short fuzzing in `make test`; longer runs: make fuzz FUZZTIME=5m
FUZZTIME ?= 10s
# Release tooling, built from the Go module proxy into $(BIN)/tools.
GORELEASER_VERSION := v2.15.1
GORELEASER := $(BIN)/tools/goreleaser-$(GORELEASER_VERSION)/goreleaser

.PHONY: all build test test-kubectl unit fmt-check vet fuzz bench soak demo demo-down deps clean packages release-check

all: build

# Static binaries (CGO_ENABLED=0), as the packages ship them, so that the
# tests run what a device runs.
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# dist/: the binaries and the .deb (amd64, arm64, armhf) and .rpm (x86_64,
# aarch64) packages, built with nfpm from packaging/nfpm; prints the sizes.
packages:
	GO=$(GO) VERSION=$(VERSION) COMMIT=$(COMMIT) bash packaging/build.sh -o dist

# goreleaser check of .goreleaser.yaml. Building goreleaser the first time
# takes about five minutes on two cores, so it is not part of `make test`.
release-check: $(GORELEASER)
	$(GORELEASER) check

$(GORELEASER):
	GOBIN=$(CURDIR)/$(dir $(GORELEASER)) $(GO) install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)

deps:
	@bash scripts/install-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Unit tests only, as any user, with nothing installed: -short skips every
# test that needs root, a daemon, a network namespace, a built binary or
# more than a few seconds (internal/testenv says which).
unit:
	$(GO) test -short ./...

# Unit, integration (root: containerd, CNI, iptables), end-to-end and
# package (packaging/: lintian, dpkg, rpm, qemu) tests, then a short fuzz
# run of every fuzz target.
test: deps fmt-check vet build test-kubectl
	FLOTILLA_BIN=$(CURDIR)/$(BIN) FLOTILLA_KUBECTL=$(CURDIR)/$(BIN)/test/kubectl $(GO) test -count=1 -timeout 40m ./...
	@$(MAKE) --no-print-directory fuzz

fuzz:
	@bash scripts/fuzz.sh $(FUZZTIME)

# The kubectl the kubectl tests run (test/kubectl: k8s.io/kubectl at the
# version go.mod pins, linked as internal/testbin.Kubectl links it), built
# once per run rather than once per test package: two minutes on two cores
# with a cold build cache, under a second when it is up to date.
KUBECTL_MOD = $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubectl)
KUBECTL_MINOR = $(word 2,$(subst ., ,$(KUBECTL_MOD)))
KUBECTL_LDFLAGS = -s -w -X k8s.io/component-base/version.gitVersion=$(patsubst v0.%,v1.%,$(KUBECTL_MOD)) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(KUBECTL_MINOR)
test-kubectl:
	@mkdir -p $(BIN)/test
	$(GO) build -ldflags '$(KUBECTL_LDFLAGS)' -o $(BIN)/test/kubectl ./test/kubectl

bench: deps build
	FLOTILLA_BIN=$(CURDIR)/$(BIN) $(GO) run ./bench/cmd/flotilla-bench

# The hub dead for 10 minutes under continuous traffic through a Service:
# no failed request, no container restarted (make test runs 60 s of it).
SOAK_OUTAGE ?= 10m
soak: deps build
	FLOTILLA_BIN=$(CURDIR)/$(BIN) FLOTILLA_OUTAGE=$(SOAK_OUTAGE) $(GO) test -count=1 -timeout 60m -run TestHubOutageUnderTraffic -v ./test/e2e/

demo: deps build
	@bash scripts/demo.sh up

demo-down:
	@bash scripts/demo.sh down

clean:
	rm -rf $(BIN) dist
