# The two commands a newcomer needs: `make run` and `make test`.
# Both start a private PostgreSQL under .data/ unless DATABASE_URL is set.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
# The Go toolchain is the one go.mod's toolchain line pins (a patched
# release): the go command downloads it from the module proxy once. Set
# here because a machine whose GOTOOLCHAIN is "local" ignores that line.
export GOTOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)
TOOL := $(GO) tool -modfile=tools/go.mod
SQLC := $(TOOL) sqlc
STATICCHECK := $(TOOL) staticcheck
# The test cluster trades durability for speed: its data is thrown away.
# synchronous_commit stays on: a test checks that the outbox dispatcher's own
# connections, and only those, turn it off.
TEST_PG_OPTS := -c fsync=off -c full_page_writes=off

.PHONY: run run-citus run-cluster test conform conform-run conform-cluster deps build nats-server generate check-generated check-compose lint vuln gosec unit fuzz pg-stop clean
# starter:remove begin
.PHONY: starter starter-check bench bench-compare bench-citus bench-outbox overload chaos chaos-cluster-short
# starter:remove end

## run: the demo API on http://127.0.0.1:8080 (HTTP_ADDR to change), demo tenants seeded, and the
##      payment simulator as its own process with a key and a webhook secret made for this run
run: build
	@exec scripts/run.sh

## run-citus: `make run` on a local Citus cluster: a coordinator and two workers (private clusters under
##            .data/postgres/citusdev-*), the schema distributed by tenant; Citus installed or built from CITUS_SRC
run-citus: build
	@scripts/citus.sh --install
	@DATABASE_URL="$$(scripts/citus.sh citusdev)"; export DATABASE_URL; \
	 echo "on Citus: the coordinator at $$DATABASE_URL, two workers (scripts/citus.sh --stop citusdev stops them)"; \
	 exec scripts/run.sh

## run-cluster: the demo past one machine: a Citus cluster (coordinator and two workers), three NATS servers
##              (NATS_STREAM_REPLICAS=3), the simulator and two API replicas behind HAProxy on HTTP_ADDR (default
##              127.0.0.1:8080), checked on /readyz; Ctrl-C stops all but the clusters (scripts/run-cluster.sh)
run-cluster: build nats-server
	@exec scripts/run-cluster.sh

## test: every check CI runs: generated code, compose file, formatting, go.mod tidy, vet, staticcheck,
##       known vulnerabilities, gosec, the conformance kit against `make run` and `make run-cluster`, all tests
##       with -race (and every Go benchmark once, so none rots)
test: deps check-generated check-compose lint vuln gosec conform-run conform-cluster unit

## conform: the conformance kit (proving/conformance), a black-box suite of docs/CONTRACT.md, against the service
##          at BASE (make conform BASE=http://127.0.0.1:8080); KEYS=key1,key2 are two tenants' API keys, needed
##          unless BASE runs in demo mode (GET /demo names its keys). One line per case, then "N passed, M failed"
conform:
	@[ -n "$(BASE)" ] || { echo "conform: set BASE, e.g. make conform BASE=http://127.0.0.1:8080 [KEYS=key1,key2]" >&2; exit 2; }
	@mkdir -p bin && $(GO) build -o bin/conform ./proving/cmd/conform
	@bin/conform --base "$(BASE)" $(if $(KEYS),--keys "$(KEYS)")

## conform-run: the kit against `make run` started in the background on a free loopback port (its own PostgreSQL
##              cluster "conform"), stopped whatever the outcome (scripts/conform.sh); make test runs it
conform-run: build
	@scripts/conform.sh run

## conform-cluster: the kit against `make run-cluster` (its own Citus and NATS clusters "clusterconform", two
##                  replicas behind HAProxy) started the same way, all of it stopped afterwards; make test runs it
conform-cluster: build nats-server
	@scripts/conform.sh cluster

# starter:remove begin
test: starter-check

## starter: turn this checkout into the start of a service of your own, MODULE its Go module
##          (e.g. example.com/acme/pay): the module renamed, the demo UI, the /demo routes, the chaos run and
##          the benchmarks removed; in place (a checkout without uncommitted changes), or in a new folder DIR
##          (scripts/starter.sh, docs/FORKING.md)
starter:
	@[ -n "$(MODULE)" ] || { echo "starter: name your module: make starter MODULE=example.com/acme/pay [DIR=../pay]" >&2; exit 2; }
	@scripts/starter.sh "$(MODULE)" $(DIR)

## starter-check: make starter on a throwaway copy of this checkout (.data/starter-check), then the copy's
##                gofmt, vet and tests (without -race: make test ran that code with it), on the PostgreSQL and the Citus cluster of make test
##                (the copy's Citus-only tests; the second run of the contract on Citus is left to make test)
starter-check:
	@scripts/citus.sh --install
	@DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/postgres.sh test)"; export DATABASE_URL; \
	 CITUS_DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/citus.sh citustest)"; export CITUS_DATABASE_URL; \
	 scripts/starter.sh --check
# starter:remove end

## deps: install the Debian packages the tests need when missing (scripts/deps.sh)
deps:
	@scripts/deps.sh

build:
	@mkdir -p bin
	$(GO) build -o bin/api ./cmd/api
	$(GO) build -o bin/pspsim ./proving/cmd/pspsim
	$(GO) build -o bin/conform ./proving/cmd/conform

## nats-server: bin/nats-server, the version go.mod pins (the one api serve embeds), which
##              scripts/nats-cluster.sh runs as a three-server JetStream cluster
nats-server:
	@mkdir -p bin
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2

## generate: regenerate each feature's internal/dbsqlc from db/queries and db/migrations (sqlc pinned in tools/go.mod)
generate:
	$(SQLC) generate

## check-generated: fail when the committed sqlc code is stale
check-generated:
	$(SQLC) diff

## check-compose: validate docker-compose.yml offline (no Docker engine needed)
check-compose:
	docker-compose config -q

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	 if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod is not tidy: run go mod tidy"; exit 1; }
	@$(GO) -C tools mod tidy -diff || { echo "tools/go.mod is not tidy: run go mod tidy in tools/"; exit 1; }
	$(GO) vet ./...
	$(GO) -C tools vet ./...
	$(STATICCHECK) ./...
	$(GO) -C tools tool staticcheck ./...

# The Go vulnerability database as of the golang.org/x/vulndb version pinned
# in tools/go.mod (update that version on purpose, like any dependency),
# indexed once per version under .data/.
VULNDB_VERSION := $(shell awk '$$1 == "golang.org/x/vulndb" { print $$2 }' tools/go.mod)
VULNDB := .data/vulndb/$(VULNDB_VERSION)

## vuln: govulncheck, offline, against that database: fails on a vulnerability our code calls that has a
##       fix, and on one without a fix that docs/SECURITY.md does not list with its reason (tools/vulnpolicy)
vuln:
	@if [ ! -f "$(VULNDB)/index/db.json" ]; then \
	   echo "vuln: indexing the Go vulnerability database $(VULNDB_VERSION)"; \
	   $(GO) -C tools mod download golang.org/x/vulndb; \
	   osv="$$($(GO) -C tools list -m -f '{{.Dir}}' golang.org/x/vulndb)/data/osv"; \
	   rm -rf "$(VULNDB).tmp"; mkdir -p "$$(dirname "$(VULNDB)")"; \
	   $(TOOL) indexdb -vulns "$$osv" -out "$(VULNDB).tmp" >/dev/null; \
	   mv "$(VULNDB).tmp" "$(VULNDB)"; \
	 fi
	@$(TOOL) govulncheck -db "file://$(CURDIR)/$(VULNDB)" -format json ./... >.data/vulndb/report.json
	@$(GO) -C tools build -o "$(CURDIR)/.data/bin/vulnpolicy" ./vulnpolicy
	@.data/bin/vulnpolicy docs/SECURITY.md <.data/vulndb/report.json

## gosec: the gosec security linter on the service (the proving ground is not the service); a finding
##        left in place says why on its line: // #nosec G<rule> -- <reason>
gosec:
	@bad="$$(git grep -n '#nosec' -- '*.go' | grep -v '#nosec G[0-9]\{3\}\( G[0-9]\{3\}\)* -- [^ ]' || true)"; \
	 if [ -n "$$bad" ]; then echo "a #nosec without its rule and reason (#nosec G<rule> -- <reason>):"; echo "$$bad"; exit 1; fi
	$(TOOL) gosec -quiet -exclude-generated -exclude-dir=proving ./...

# Citus (the tests run the end-to-end contract on a local Citus cluster too):
# taken from the installed PostgreSQL, or built from CITUS_SRC, by default
# the Citus source in the shared folder next to this checkout when there is
# one. Without either, scripts/citus.sh says what to install.
CITUS_SRC ?= $(firstword $(wildcard $(CURDIR)/../shared/vendor/citus-13.*.tar.gz))
export CITUS_SRC
# The packages whose tests run a second time on Citus (and every migration,
# down and up, by internal/postgres TestMigrateDownAndUp): the end-to-end
# contract (internal/app) and every background role's own tests. The
# stores the contract runs through (internal/idempotency, internal/orders,
# and internal/inbox under fulfillment) run on Citus there, not again on
# their own: that took 104 s of the Citus run's two cores, past the end of
# internal/app, its longest package (2026-12-05).
CITUS_TEST_PKGS := ./internal/app/ ./internal/outbox/ ./internal/operation/ ./internal/retention/ ./internal/webhooks/ \
	./internal/fulfillment/ ./internal/payments/ ./internal/attention/
# The second run leaves out what Citus does not change and the first run
# covered: the HTTP edge (bodies, headers, slow clients, overload), the
# process (configuration, startup, network faults, tuning), metrics, traces
# and the checks of the docs and the layout. With them, internal/app alone
# took 753 s on Citus on two cores (and past its 15 minutes beside the other
# packages, 2026-12-05), most of it each test's own cluster database and
# server; its network-fault tests there measured the machine's load, not
# the service.
CITUS_TEST_SKIP := ^(TestStartup|TestNetworkFaults|TestMetric|TestDashboard|TestEveryDocumentedSeries|TestKnownSeries|TestTrace|TestIncomingTraceContext|TestEventsFlowThroughAClusterThatLosesAServer|TestOverload|TestSlowBodies|TestBody|TestClientSlowerThanTheReadTimeout|TestClientHangingUpMidBody|TestHeaderlessConnections|TestNetHTTPAnswers|TestRequestMemberNames|TestTwoAuthorizationHeaders|TestIdempotencyKeyErrors|TestValidationErrors|TestUnknownRouteAndMethod|TestClientRequestID|TestRequestIDIsPerAttempt|TestFailedAdminAuthentications|TestWebhookSecretsRefuse|TestConfig|TestCheck|TestLoadTuning|TestEveryTuningField|TestTimeouts|TestOpenAPI(Document|DescribesEveryRoute|ValidatorCatchesDrift|TransportReportsDrift)$$|TestDocs|TestReadme|TestExtending|TestEachTable|TestPackagePicture|TestNoSourceFileIsLong|TestVocabularies|TestEveryOperationIs|TestRegistryCheck|TestReadOnePayment)
# starter:remove begin
# So do the UI's browser tests and the demo mode's: the same API, driven
# differently.
CITUS_TEST_SKIP := $(CITUS_TEST_SKIP)|^(TestBrowser|TestDemo)
# starter:remove end
# Packages whose tests take minutes but mostly wait on the processes they
# start run beside the first run instead of in it (whose end they held up
# alone), and unit prints their output after it; the Citus run starts once
# both are done, on a machine left to it (its timing-bound tests failed
# with the chaos runs beside them).
UNIT_BESIDE :=
# starter:remove begin
# The chaos runs (proving/chaos: the short run on PostgreSQL and on the
# clusters): in the first run they held up its end alone, for minutes of a
# mostly idle machine (2026-12-05).
UNIT_BESIDE := ./proving/chaos/
# starter:remove end

unit:
	@scripts/citus.sh --install
	@DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/postgres.sh test)"; export DATABASE_URL; \
	 CITUS_DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/citus.sh citustest)"; export CITUS_DATABASE_URL; \
	 first=$$($(GO) list ./...); \
	 if [ -n "$(UNIT_BESIDE)" ]; then first=$$(grep -vxF "$$($(GO) list $(UNIT_BESIDE))" <<<"$$first"); fi; \
	 failed=0 beside=""; \
	 if [ -n "$(UNIT_BESIDE)" ]; then \
	   echo "unit: $(UNIT_BESIDE) beside the first run (its output follows that run's)"; \
	   $(GO) test -race -count=1 -timeout 15m -bench . -benchtime 1x $(UNIT_BESIDE) >.data/unit-beside.log 2>&1 & beside=$$!; \
	 fi; \
	 $(GO) test -race -count=1 -timeout 15m -bench . -benchtime 1x $$first || failed=1; \
	 if [ -n "$$beside" ]; then \
	   echo "unit: $(UNIT_BESIDE), run beside"; wait "$$beside" || failed=1; cat .data/unit-beside.log; \
	 fi; \
	 if [ "$$failed" = 0 ]; then \
	   echo "unit: the contract and the background roles again, on Citus (coordinator and two workers)"; \
	   DATABASE_URL="$$CITUS_DATABASE_URL" $(GO) test -race -count=1 -timeout 15m -skip '$(CITUS_TEST_SKIP)' $(CITUS_TEST_PKGS) || failed=1; \
	 fi; \
	 if [ "$$failed" = 0 ]; then \
	   echo "unit: every migration down and up again on Citus (a form that runs on plain PostgreSQL only fails here)"; \
	   DATABASE_URL="$$CITUS_DATABASE_URL" $(GO) test -race -count=1 -timeout 5m -run '^TestMigrateDownAndUp$$' ./internal/postgres/ || failed=1; \
	 fi; \
	 exit "$$failed"
	$(GO) -C tools test -count=1 ./...

## fuzz: run every fuzz target for FUZZTIME each (default 30s)
FUZZTIME ?= 30s
fuzz:
	@DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/postgres.sh test)"; export DATABASE_URL; \
	 for pkg in $$($(GO) list ./...); do \
	   for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	     echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
	   done; \
	 done

# starter:remove begin
## bench: POST /v1/orders (fresh and replayed keys) vs the same SQL run directly, on a durable private
##        PostgreSQL; BENCH_DURATION per scenario (default 10s), BENCH_ARGS for more flags, BENCH_TUNING for
##        the API's tuning file (api serve --tuning, docs/CONFIGURATION.md), BENCH_API_ENV for more of its
##        environment (docs/BENCHMARKS.md); the API's embedded broker stores in .data/bench/nats, emptied at
##        each start
##        BENCH_SERVICE_CPUS and BENCH_CLIENT_CPUS (taskset lists, e.g. 0 and 1) pin PostgreSQL, the simulator and
##        the API (and the http scenario's bare server), and the load generator, to CPUs of their own
##        BENCH_BUDGET=1: the latency budget of a create at 1 client instead, from the API's traces (it exports
##        them to the bench) next to the sql floor's
BENCH_DURATION ?= 10s
BENCH_BUDGET ?=
BENCH_ARGS ?=
BENCH_API_ENV ?=
BENCH_TUNING ?=
BENCH_SERVICE_CPUS ?=
BENCH_CLIENT_CPUS ?=
bench: build
	@if [ -n "$(BENCH_SERVICE_CPUS)" ]; then taskset -pc "$(BENCH_SERVICE_CPUS)" $$$$ >/dev/null || exit 1; \
	   echo "bench: PostgreSQL, the simulator and the API on CPUs $(BENCH_SERVICE_CPUS)"; fi; \
	 pin=""; if [ -n "$(BENCH_CLIENT_CPUS)" ]; then pin="taskset -c $(BENCH_CLIENT_CPUS)"; \
	   echo "bench: the load generator on CPUs $(BENCH_CLIENT_CPUS)"; fi; \
	 bare=""; if [ -n "$(BENCH_SERVICE_CPUS)" ]; then bare="--bare-cpus $(BENCH_SERVICE_CPUS)"; fi; \
	 DATABASE_URL="$$(PG_SERVER_OPTS= scripts/postgres.sh bench)"; export DATABASE_URL; \
	 rm -rf .data/bench/nats; mkdir -p .data/bench; \
	 port=""; \
	 for _ in $$(seq 1 200); do \
	   c=$$((20000 + RANDOM % 30000)); \
	   if ! (exec 3<>"/dev/tcp/127.0.0.1/$$c") 2>/dev/null; then port=$$c; break; fi; \
	 done; \
	 [ -n "$$port" ] || { echo "bench: no free port found" >&2; exit 1; }; \
	 traced=""; budget=""; \
	 if [ -n "$(BENCH_BUDGET)" ]; then \
	   tport=$$((port + 1)); \
	   if (exec 3<>"/dev/tcp/127.0.0.1/$$tport") 2>/dev/null; then echo "bench: port $$tport for the traces is taken, try again" >&2; exit 1; fi; \
	   traced="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:$$tport/v1/traces OTEL_BSP_SCHEDULE_DELAY=100 OTEL_BSP_MAX_QUEUE_SIZE=262144 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4096"; \
	   budget="--budget 127.0.0.1:$$tport"; \
	 fi; \
	 source scripts/pspsim.sh; \
	 pid=""; \
	 trap '[ -z "$$pid" ] || { kill $$pid 2>/dev/null && wait $$pid 2>/dev/null; }; pspsim_stop; scripts/postgres.sh --stop bench || true' EXIT; \
	 pspsim_start "http://127.0.0.1:$$port/webhooks/psp" .data/bench/pspsim.log; \
	 env DEMO_MODE=true SWEEP_INTERVAL=0 NATS_STORE_DIR=.data/bench/nats $$traced $(BENCH_API_ENV) HTTP_ADDR="127.0.0.1:$$port" ./bin/api serve $(if $(BENCH_TUNING),--tuning "$(BENCH_TUNING)") >.data/bench/api.log 2>&1 & \
	 pid=$$!; \
	 echo "bench: API pid $$pid on 127.0.0.1:$$port, log in .data/bench/api.log (the payment simulator's in .data/bench/pspsim.log)"; \
	 pgpid=$$(head -n1 .data/postgres/bench/data/postmaster.pid 2>/dev/null || echo 0); \
	 $$pin $(GO) run ./proving/cmd/bench --api "http://127.0.0.1:$$port" --api-pid "$$pid" --pg-pid "$$pgpid" --wait 60s $$bare $$budget \
	   --duration "$(BENCH_DURATION)" $(BENCH_ARGS)

## bench-compare: this checkout's API and the API of REF (a commit; LABEL names it, default its short hash)
##                side by side on one PostgreSQL and one simulator, every API scenario against one right after the
##                other, and this one's figures as multiples of the other's (scripts/bench-compare.sh); BENCH_ARGS
##                as for bench, e.g. --scenarios create,replay,pay,pay-only
bench-compare: build
	@command -v curl >/dev/null || { echo "bench-compare: needs curl (apt-get install curl)" >&2; exit 1; }
	@REF="$(REF)" LABEL="$(LABEL)" BENCH_DURATION="$(BENCH_DURATION)" BENCH_ARGS="$(BENCH_ARGS)" scripts/bench-compare.sh

## overload: on the bench's stack, create throughput measured closed loop, then OVERLOAD_FACTOR (5) times it
##           offered open loop for OVERLOAD_DURATION (60s), then SOAK_FRACTION (0.5) of it for ATTACK (30s) alone
##           and as long again beside slow clients (slow bodies, connections without headers; 0: no attack
##           phase), then SOAK (30m) at SOAK_FRACTION of it (docs/OVERLOAD.md)
##           The generator gets the last CPU and the service the others (OVERLOAD_CLIENT_CPUS, OVERLOAD_SERVICE_CPUS;
##           empty for none), so that offering 5x does not take the service's CPU: on one CPU nothing is pinned
OVERLOAD_FACTOR ?= 5
OVERLOAD_DURATION ?= 60s
SOAK ?= 30m
SOAK_FRACTION ?= 0.5
ATTACK ?= 30s
OVERLOAD_CLIENT_CPUS ?= $(shell n=$$(nproc); [ "$$n" -ge 2 ] && command -v taskset >/dev/null && echo $$((n-1)))
OVERLOAD_SERVICE_CPUS ?= $(shell n=$$(nproc); [ "$$n" -ge 2 ] && command -v taskset >/dev/null && echo 0-$$((n-2)))
overload:
	@$(MAKE) --no-print-directory bench BENCH_DURATION=10s \
	  BENCH_SERVICE_CPUS="$(OVERLOAD_SERVICE_CPUS)" BENCH_CLIENT_CPUS="$(OVERLOAD_CLIENT_CPUS)" \
	  BENCH_ARGS="--clients 16 --overload $(OVERLOAD_FACTOR) --overload-duration $(OVERLOAD_DURATION) --attack $(ATTACK) --soak $(SOAK) --soak-fraction $(SOAK_FRACTION) $(BENCH_ARGS)"

## bench-citus: create and replay on one PostgreSQL against Citus (coordinator and two workers), in turn,
##              ROUNDS times (default 3), with each round's Citus/plain ratios (docs/SCALING.md)
bench-citus: build
	@scripts/citus.sh --install
	@ROUNDS="$(or $(ROUNDS),3)" BENCH_DURATION="$(BENCH_DURATION)" scripts/bench-citus.sh

## bench-outbox: outbox burn-down (100,000 events to JetStream) and commit-to-consumed latency at
##               200 events/s on a durable private PostgreSQL (docs/BENCHMARKS.md)
OUTBOXBENCH_ARGS ?=

bench-outbox:
	@DATABASE_URL="$$(PG_SERVER_OPTS= scripts/postgres.sh bench)"; export DATABASE_URL; \
	 trap 'scripts/postgres.sh --stop bench || true' EXIT; \
	 $(GO) run ./proving/cmd/outboxbench $(OUTBOXBENCH_ARGS)

## chaos: start the real stack (2 APIs, pspsim, a PostgreSQL of the run's own, NATS with the outbox) and drive
##        CHAOS_INTENTS seeded intents through real faults (the database killed and stopped, and the network to
##        PostgreSQL, NATS and the provider broken, among them), then check
##        "charged exactly once" and the other invariants; CHAOS_SEED replays a schedule, CHAOS_ARGS passes more
##        flags (--db-faults=false runs on DATABASE_URL without database faults; --cluster runs on a Citus cluster
##        and a three-server JetStream cluster of the run's own, with their faults; docs/RELIABILITY.md)
CHAOS_INTENTS ?= 10000
CHAOS_SEED ?= 1
CHAOS_ARGS ?=
chaos:
	$(GO) run ./proving/cmd/chaos --intents $(CHAOS_INTENTS) --seed $(CHAOS_SEED) $(CHAOS_ARGS)

## chaos-cluster-short: TestChaosClusterShort alone, the short chaos run (200 intents) on the scaled-out topology
##                      (make test runs it too)
chaos-cluster-short:
	@scripts/citus.sh --install
	$(GO) test -count=1 -timeout 15m -run TestChaosClusterShort -v ./proving/chaos/

# starter:remove end

## pg-stop: stop the private PostgreSQL and Citus clusters (make run-cluster's too)
pg-stop:
	@for c in dev test bench chaos conform; do scripts/postgres.sh --stop $$c; done
	@for c in citusdev citustest citusbench clusterdev clusterconform; do scripts/citus.sh --stop $$c; done

clean: pg-stop
	@for d in .data/nats-cluster-*/; do [ -d "$$d" ] || continue; d=$${d%/}; scripts/nats-cluster.sh --stop "$${d#.data/nats-cluster-}"; done
	rm -rf bin .data
