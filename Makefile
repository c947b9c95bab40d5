# Flotilla: `make demo` runs a hub and agents on this machine; `make test`
# checks everything. Both install what they need (as root, from Debian).
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X flotilla.dev/flotilla/internal/version.Version=$(VERSION) -X flotilla.dev/flotilla/internal/version.Commit=$(COMMIT)
BIN := bin
# Short fuzzing in `make test`; longer runs: make fuzz FUZZTIME=5m
FUZZTIME ?= 10s

.PHONY: all build test unit fmt-check vet fuzz bench soak demo demo-down deps clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

deps:
	@bash scripts/install-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Unit, integration (root: containerd, CNI, iptables) and end-to-end tests,
# then a short fuzz run of every fuzz target.
test: deps fmt-check vet build
	FLOTILLA_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m ./...
	@$(MAKE) --no-print-directory fuzz

fuzz:
	@bash scripts/fuzz.sh $(FUZZTIME)

bench: deps build
	FLOTILLA_BIN=$(CURDIR)/$(BIN) $(GO) run ./bench/cmd/flotilla-bench

# The hub dead for 10 minutes under continuous traffic through a Service:
# no failed request, no container restarted (make test runs 45 s of it).
SOAK_OUTAGE ?= 10m
soak: deps build
	FLOTILLA_BIN=$(CURDIR)/$(BIN) FLOTILLA_OUTAGE=$(SOAK_OUTAGE) $(GO) test -count=1 -timeout 60m -run TestHubOutageUnderTraffic -v ./test/e2e/

demo: deps build
	@bash scripts/demo.sh up

demo-down:
	@bash scripts/demo.sh down

clean:
	rm -rf $(BIN)
