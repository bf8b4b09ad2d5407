# The two commands a newcomer needs: `make run` and `make test`.
# Both start a private PostgreSQL under .data/ unless DATABASE_URL is set.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
SQLC := $(GO) tool -modfile=tools/go.mod sqlc
STATICCHECK := $(GO) tool -modfile=tools/go.mod staticcheck
# The test cluster trades durability for speed: its data is thrown away.
TEST_PG_OPTS := -c fsync=off -c synchronous_commit=off -c full_page_writes=off

.PHONY: run test build generate check-generated lint unit fuzz bench pg-stop clean

## run: the demo API on http://127.0.0.1:8080 (HTTP_ADDR to change), demo tenants seeded
run: build
	@export DATABASE_URL="$$(scripts/postgres.sh dev)"; \
	 export DEMO_MODE="$${DEMO_MODE:-true}"; \
	 exec ./bin/api serve

## test: every check CI runs: generated code, formatting, vet, staticcheck, all tests with -race
test: check-generated lint unit

build:
	@mkdir -p bin
	$(GO) build -o bin/api ./cmd/api

## generate: regenerate internal/dbsqlc from db/queries and db/migrations (sqlc pinned in tools/go.mod)
generate:
	$(SQLC) generate

## check-generated: fail when the committed sqlc code is stale
check-generated:
	$(SQLC) diff

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	 if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

unit:
	@export DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/postgres.sh test)"; \
	 $(GO) test -race -count=1 -timeout 15m ./...

## fuzz: run every fuzz target for FUZZTIME each (default 30s)
FUZZTIME ?= 30s
fuzz:
	@export DATABASE_URL="$$(PG_SERVER_OPTS='$(TEST_PG_OPTS)' scripts/postgres.sh test)"; \
	 for pkg in $$($(GO) list ./...); do \
	   for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	     echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
	   done; \
	 done

## pg-stop: stop the private PostgreSQL clusters
pg-stop:
	@scripts/postgres.sh --stop dev; scripts/postgres.sh --stop test

clean: pg-stop
	rm -rf bin .data
