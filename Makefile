# skc-supervisor — build, run and test.
#
# On a fresh Debian 12 machine `make run` and `make test` do all set-up: the
# tmux (and, for the test suite, rsyslog, promtool and PostgreSQL) packages are
# installed with apt-get when missing, and Go modules come from the module proxy.

GO        ?= go
BIN       := bin/skc-supervisor
PKGS      := ./...
GOFLAGS_TEST ?=
# Test timeout: the whole suite is budgeted at ~15 minutes on 2 cores.
TEST_TIMEOUT ?= 20m
APT_GET   := DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: all build run test test-tmux37 vet fmt-check deps tmux test-deps bench bench-panes bench-fleet bench-scale soak fuzz demo \
        model install-user-unit clean

all: build

build:
	$(GO) build -trimpath -buildvcs=auto -o $(BIN) ./cmd/skc-supervisor

# tmux is the one runtime dependency. Install it when it is missing, and say so.
tmux:
	@if ! command -v tmux >/dev/null 2>&1; then \
		echo "make: tmux is missing; installing it with apt-get (Debian package 'tmux')"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq tmux; \
	fi
	@tmux -V

# Packages the test suite drives for real: rsyslog (log shipping test), promtool
# (Debian package 'prometheus', metrics format check), PostgreSQL (Debian package
# 'postgresql': the fleet fence's tests start private servers from its binaries in
# /usr/lib/postgresql/*/bin, internal/pgtest) and util-linux (setpriv for the
# other-uid tests; unshare and nsenter put each fleet host in its own pid, mount
# and UTS namespaces, integration/nshost_test.go). Installed only when missing.
test-deps: tmux
	@need=""; \
	command -v rsyslogd >/dev/null 2>&1 || need="$$need rsyslog"; \
	command -v promtool >/dev/null 2>&1 || need="$$need prometheus"; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need="$$need postgresql"; \
	{ command -v setpriv && command -v unshare && command -v nsenter; } >/dev/null 2>&1 || need="$$need util-linux"; \
	if [ -n "$$need" ]; then \
		echo "make: installing test dependencies with apt-get:$$need"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq --no-install-recommends $$need; \
	fi

# On a terminal, serve runs as a job of its own (bash -m gives it the terminal's
# foreground): Ctrl-C then reaches serve alone, which stops cleanly with status
# 0, and make ends with that status instead of dying of the SIGINT itself.
run: tmux build
	@if [ -t 0 ] && command -v bash >/dev/null 2>&1; then \
		bash -mc './$(BIN) serve; exit $$?'; \
	else \
		./$(BIN) serve; \
	fi

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

test: test-deps fmt-check vet
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(GOFLAGS_TEST) $(PKGS)

# The tmux 3.7c leg: the packages whose tests drive a real tmux, run again
# against tmux 3.7c built from source (scripts/build-tmux.sh; cached under
# ~/.cache/skc-supervisor by the tarball's sha256, build dependencies
# installed with apt-get when missing). The test suite takes its tmux from
# SKC_TEST_TMUX (internal/tmuxtest). Without the tarball this says so on one
# line and succeeds: the tarball is not part of the repository.
TMUX37_TARBALL ?= ../shared/tmux/src/tmux-3.7c.tar.gz
TMUX_PKGS      := ./tmuxctl/ ./census/ ./lifecycle/ ./api/... ./cmd/... ./scope/ ./doctor/ ./integration/...
test-tmux37: test-deps
	@if [ ! -f "$(TMUX37_TARBALL)" ]; then \
		echo "make: SKIP tmux 3.7c leg: $(TMUX37_TARBALL) not found (set TMUX37_TARBALL=path/to/tmux-3.7c.tar.gz to run it)"; \
		exit 0; \
	fi; \
	bin=$$(./scripts/build-tmux.sh "$(TMUX37_TARBALL)") || exit 1; \
	echo "make: tmux leg with $$("$$bin" -V) ($$bin)"; \
	SKC_TEST_TMUX="$$bin" $(GO) test -race -timeout $(TEST_TIMEOUT) $(GOFLAGS_TEST) $(TMUX_PKGS)

# Benchmarks compare against a baseline measured in the same run; results go to
# BENCHMARKS.md by hand with the command that produced them. Each package's
# micro-benchmark runs with the command its BENCHMARKS.md section names; then
# the end-to-end harness (integration/cmd/bench) starts private daemons and tmux servers,
# kills them by pid at the end, and writes BENCHMARKS.e2e.generated.md.
bench: tmux build
	$(GO) test -run '^$$' -bench RoundTrip -benchtime 3000x -count 3 ./tmuxctl/
	$(GO) test -run '^$$' -bench Transition -benchtime 2000x -count 3 ./fence/sqlite/
	$(GO) test -run '^$$' -bench CreateFence -benchtime 500x -count 2 ./fence/postgres/
	$(GO) test -run '^$$' -bench Resync1000 -benchtime 30x -count 3 -timeout 30m ./census/
	$(GO) test -run '^$$' -bench Lookup -count 3 ./census/
	$(GO) test -run '^$$' -bench Burst100 -benchtime 3x -count 2 -timeout 20m ./census/
	SKC_BENCH_SESSIONS=1000 $(GO) test -run '^$$' -bench SubscriptionCost -benchtime 2x -timeout 20m ./census/
	SKC_BENCH_SESSIONS=1000 $(GO) test -run '^$$' -bench Reads -benchtime 200x -timeout 20m ./api/backend/
	$(GO) test -run '^$$' -bench 'Create$$' -benchtime 200x ./lifecycle/
	$(GO) test -run '^$$' -bench CreatePool/sequential -benchtime 100x ./lifecycle/
	$(GO) test -run '^$$' -bench CreatePool/burst -benchtime 20x ./lifecycle/
	$(GO) test -run '^$$' -bench 'Talk$$' -benchtime 200x ./api/backend/
	$(GO) test -run '^$$' -bench 'TalkOutput|TalkFollowers100' -benchtime 1x -timeout 20m ./api/backend/
	$(GO) run ./integration/cmd/bench -bin $(BIN) -list-n 1000 -list-reps 50 -lookups 200 -out BENCHMARKS.e2e.generated.md
	$(MAKE) bench-panes
	$(MAKE) bench-fleet

# The fleet figures (issue 19), in one run: create → published through the API
# with the PostgreSQL fence against the SQLite fence, 3 hosts (three daemons on
# one PostgreSQL) × 32 concurrent creates against one SQLite daemon, and lookups
# with either fence against GET /v1/ping. PostgreSQL is a private server of
# internal/pgtest (Debian's binaries, `make test-deps` installs them); without
# one the run writes one SKIP line and succeeds. Writes BENCHMARKS.fleet.generated.md.
FLEET_CREATES ?= 200
bench-fleet: tmux build
	$(GO) run ./integration/cmd/bench -bin $(BIN) -fleet -fleet-creates $(FLEET_CREATES) -fleet-sessions 300 -par 32 -rounds 3 -lookups 300 -out BENCHMARKS.fleet.generated.md

# Per-session overhead (issue 18, goal 1), in one run: the processes of ours in
# each session's pane tree, threads and Pss, with the binary from before the pane
# helper exec'd its agent (PANE_BASELINE, a commit of this repository built from
# `git archive` into bin/) and with this tree's; then the daemon's own memory per
# session at PANE_MEM_N sessions (capped by free ptys and memory; the run says
# where it measured). Writes BENCHMARKS.panes.generated.md. At 1,000 sessions
# here and in `make bench`; `make bench-scale` measures it at 4,000.
PANE_BASELINE ?= b0b0e87
PANE_MEM_N    ?= 1000
PANE_BASE_BIN := bin/skc-supervisor-$(PANE_BASELINE)
bench-panes: tmux build $(PANE_BASE_BIN)
	$(GO) run ./integration/cmd/bench -bin $(BIN) -pane-cost -before-bin $(PANE_BASE_BIN) -mem-n $(PANE_MEM_N) -out BENCHMARKS.panes.generated.md

$(PANE_BASE_BIN):
	rm -rf bin/baseline-src && mkdir -p bin/baseline-src
	git archive $(PANE_BASELINE) | tar -x -C bin/baseline-src
	cd bin/baseline-src && $(GO) build -trimpath -o ../skc-supervisor-$(PANE_BASELINE) ./cmd/skc-supervisor
	rm -rf bin/baseline-src

# The scale run: 4,000 live supervised sessions (capped by free ptys and memory);
# 20-40 minutes on 2 cores, most of it creating sessions. The census subscription's
# cost to tmux and the daemon's memory per session are measured at the same size
# (make bench runs both at 1,000). Every 4,000-session step is here, none in bench.
bench-scale: tmux build
	SKC_BENCH_SESSIONS=4000 $(GO) test -run '^$$' -bench SubscriptionCost -benchtime 2x -timeout 30m ./census/
	$(GO) run ./integration/cmd/bench -bin $(BIN) -scale -out BENCHMARKS.scale.generated.md
	$(MAKE) bench-panes PANE_MEM_N=4000

# The long runs: the Soak tests, and the fleet race at the issue's full size
# (TestFleetHostsRace: 50 rounds of 3 namespaced hosts x 16 racers; make test runs
# fewer rounds of it).
soak: test-deps build
	SKC_SOAK=1 $(GO) test -race -timeout 60m -run 'Soak|TestFleetHostsRace' ./integration/

# Short fuzzing passes over every parser, encoder and input decoder (found inputs land
# in each package's testdata/fuzz). FUZZTIME=5m make fuzz for longer runs.
FUZZTIME ?= 30s
FUZZ_TARGETS := tmuxctl:FuzzParser tmuxctl:FuzzQuote census:FuzzParseRow \
                api:FuzzValidate api:FuzzDecodeCreate api:FuzzDecodeInput
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; \
		echo "fuzz $$fn in ./$$pkg/ for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg/; \
	done

# The create saga's spin model (model/README.md): the default model must hold no
# violation, and each variant that removes one rule must make spin find one. spin and
# gcc are installed with apt-get when missing. NC is the number of racing creators:
# NC=2 takes about a minute; NC=3 is the full run (~112M states, ~10 CPU-minutes, ~7 GB).
NC ?= 2
model:
	NC=$(NC) ./scripts/model-check.sh

demo: tmux build
	./scripts/demo.sh

install-user-unit: build
	./scripts/install-user-unit.sh

clean:
	rm -rf bin
