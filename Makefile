# skc-supervisor — build, run and test.
#
# On a fresh Debian 12 machine `make run` and `make test` do all set-up: the
# tmux (and, for the test suite, rsyslog and promtool) packages are installed with
# apt-get when missing, and Go modules come from the module proxy.

GO        ?= go
BIN       := bin/skc-supervisor
PKGS      := ./...
GOFLAGS_TEST ?=
# Test timeout: the whole suite is budgeted at ~15 minutes on 2 cores.
TEST_TIMEOUT ?= 20m
APT_GET   := DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: all build run test vet fmt-check deps tmux test-deps bench bench-scale soak fuzz demo \
        model install-user-unit clean

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/skc-supervisor

# tmux is the one runtime dependency. Install it when it is missing, and say so.
tmux:
	@if ! command -v tmux >/dev/null 2>&1; then \
		echo "make: tmux is missing; installing it with apt-get (Debian package 'tmux')"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq tmux; \
	fi
	@tmux -V

# Packages the test suite drives for real: rsyslog (log shipping test) and promtool
# (Debian package 'prometheus', metrics format check). Installed only when missing.
test-deps: tmux
	@need=""; \
	command -v rsyslogd >/dev/null 2>&1 || need="$$need rsyslog"; \
	command -v promtool >/dev/null 2>&1 || need="$$need prometheus"; \
	command -v setpriv >/dev/null 2>&1 || need="$$need util-linux"; \
	if [ -n "$$need" ]; then \
		echo "make: installing test dependencies with apt-get:$$need"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq --no-install-recommends $$need; \
	fi

run: tmux build
	./$(BIN) serve

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

test: test-deps fmt-check vet
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(GOFLAGS_TEST) $(PKGS)

# Benchmarks compare against a baseline measured in the same run; results go to
# BENCHMARKS.md by hand with the command that produced them. Each package's
# micro-benchmark runs with the command its BENCHMARKS.md section names; then
# the end-to-end harness (integration/cmd/bench) starts private daemons and tmux servers,
# kills them by pid at the end, and writes BENCHMARKS.e2e.generated.md.
bench: tmux build
	$(GO) test -run '^$$' -bench RoundTrip -benchtime 3000x -count 3 ./tmuxctl/
	$(GO) test -run '^$$' -bench Transition -benchtime 2000x -count 3 ./fence/
	$(GO) test -run '^$$' -bench Resync1000 -benchtime 30x -count 3 -timeout 30m ./census/
	$(GO) test -run '^$$' -bench Lookup -count 3 ./census/
	$(GO) test -run '^$$' -bench Burst100 -benchtime 3x -count 2 -timeout 20m ./census/
	SKC_BENCH_SESSIONS=4000 $(GO) test -run '^$$' -bench SubscriptionCost -benchtime 2x -timeout 20m ./census/
	SKC_BENCH_SESSIONS=1000 $(GO) test -run '^$$' -bench Reads -benchtime 200x -timeout 20m ./api/backend/
	$(GO) test -run '^$$' -bench Create -benchtime 200x ./lifecycle/
	$(GO) run ./integration/cmd/bench -bin $(BIN) -list-n 1000 -list-reps 50 -lookups 200 -out BENCHMARKS.e2e.generated.md

# The scale run: 4,000 live supervised sessions (capped by free ptys and memory);
# 20-40 minutes on 2 cores, most of it creating sessions.
bench-scale: tmux build
	$(GO) run ./integration/cmd/bench -bin $(BIN) -scale -out BENCHMARKS.scale.generated.md

soak: tmux build
	SKC_SOAK=1 $(GO) test -race -timeout 60m -run Soak ./integration/

# Short fuzzing passes over every parser, encoder and input decoder (found inputs land
# in each package's testdata/fuzz). FUZZTIME=5m make fuzz for longer runs.
FUZZTIME ?= 30s
FUZZ_TARGETS := tmuxctl:FuzzParser tmuxctl:FuzzQuote census:FuzzParseRow \
                api:FuzzValidate api:FuzzDecodeCreate
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
