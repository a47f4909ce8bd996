# schedloop — build, test and benchmark targets. `make help` lists them.

GO          ?= go
BIN         ?= bin
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
DEMO_DB     ?= schedloop
K8S_VERSION := v1.37.2
# kube-scheduler reports this version (and kubectl/the apiserver check it)
# instead of v0.0.0-master.
SCHED_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
                 -X k8s.io/component-base/version.gitMajor=1 \
                 -X k8s.io/component-base/version.gitMinor=37
TEST_TIMEOUT ?= 60m
# Seconds each fuzz target runs under `make fuzz`.
FUZZTIME    ?= 20s

export DATABASE_URL

.PHONY: help build test difftest lint bench bench-hostile soak web eval fgd-table fuzz postgres postgres-stop chromium demo demo-db demo-smoke clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build every command into ./bin
	$(GO) build -o $(BIN)/ $$($(GO) list ./cmd/... | grep -v '/cmd/scheduler$$')
	$(GO) build -ldflags "$(SCHED_LDFLAGS)" -o $(BIN)/scheduler ./cmd/scheduler

test: postgres chromium ## run every test (starts a local Postgres if none answers, installs Chromium if missing)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

difftest: ## the simulator against the live scheduler on the full differential workload (unlabelled nodes, GPU shares, preemption), and with reservations and DRA, gangs declared through each gang API; fails below 98% identical placements
	$(GO) test -count=1 -run '^TestDifferential(Reservation|DRA)?$$' -timeout 80m -v ./internal/sim/fidelity/ -args -difftest.full -difftest.gang-apis podgroup,workload

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench: postgres ## run the benchmarks and print each headline figure as `BENCH <name> <value> <unit>`
	@# Benchmarks report headline metrics as "<name>@<unit>"; benchreport prints
	@# the median of each as a BENCH line (raw output goes to stderr).
	$(GO) test -run '^$$' -bench '^(BenchmarkBulkIngest|BenchmarkOnceIngest)$$' -benchtime 3x -count 5 ./internal/store/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkScrapeRound$$' -benchtime 400x -count 5 ./internal/dcgm/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkParseOpenMetricsVsText$$' -benchtime 20x -count 5 ./internal/dcgm/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkCollectorCoresPer100kGPUs$$' -benchtime 1x -count 3 ./internal/collector/ | $(GO) run ./scripts/benchreport
	$(MAKE) --no-print-directory bench-hostile
	$(GO) test -run '^$$' -bench '^(BenchmarkOpenbReplay|BenchmarkCandidates)$$' -benchtime 3x -count 5 ./internal/sim/ ./internal/tuner/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkForecastAllPending$$' -benchtime 1x -count 5 ./internal/eta/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkDashboardAPI$$' -benchtime 1x -count 3 ./internal/api/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkAPIStorm$$' -benchtime 1x -count 1 -timeout 30m ./internal/api/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkSchedulerThroughput$$' -benchtime 1x -timeout 30m ./internal/schedplugins/bench/ -args -sched.nodes 1000 -sched.pods 10000 | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkUpstreamPerf$$' -benchtime 1x -count 3 -timeout 60m ./internal/schedplugins/upstreamperf/ | $(GO) run ./scripts/benchreport
	$(GO) test -run '^$$' -bench '^BenchmarkSimLiveAgreement$$' -benchtime 1x -timeout 180m ./internal/sim/fidelity/ | $(GO) run ./scripts/benchreport
	scripts/bench-harness.sh

bench-hostile: ## 100 exporters beside 4 hostile ones for 5 minutes at 15 s: BENCH collector_hostile_target_good_scrape_ratio (~6 min)
	$(GO) test -run '^$$' -bench '^BenchmarkHostileTargets$$' -benchtime 1x -count 1 -timeout 20m ./internal/collector/ | $(GO) run ./scripts/benchreport

SOAK_DURATION ?= 30m
SOAK_SPEED    ?= 120
# SOAK_HEAP, when set, is a directory the soak writes heap profiles to.
SOAK_HEAP     ?=

soak: postgres ## the collector for SOAK_DURATION (30m) under faults: Postgres and apiserver cuts, hostile exporters, read storms; prints loss, duplicates, RSS, goroutines, lag
	$(GO) test -run '^$$' -bench '^BenchmarkSoak$$' -benchtime 1x -count 1 -timeout 3h -v ./internal/collector/ \
	  -args -soak.duration $(SOAK_DURATION) -soak.speed $(SOAK_SPEED) $(if $(SOAK_HEAP),-soak.heapprofile $(SOAK_HEAP)) | $(GO) run ./scripts/benchreport

web: ## rebuild the dashboard assets (web/dist, embedded into the collector) from web/'s package files
	cd web && npm ci && npm run build

# Full public traces live outside the project (see ../shared/traces/README.md).
TRACES ?= ../shared/traces

fgd-table: ## the FGD paper's allocation experiment on every openb pod list, beside the artifact's results, with a verdict per list
	$(GO) run ./cmd/tuner fgd-table -trace-dir $(TRACES)/alibaba-gpu-2023 -expected $(TRACES)/fgd-expected-results -traces all -seeds 42-51

eval: ## the Helios queueing experiment on Philly (needs ../shared/traces): FIFO, SJF, schedloop default and tuned, beside the published figures; the wait estimates backtested on its window
	$(GO) run ./cmd/tuner helios-table -trace-dir $(TRACES) -bench
	$(GO) run ./cmd/tuner helios-table -trace-dir $(TRACES) -load 3 -policies fifo,sjf,default,tuned,hp
	$(GO) run ./cmd/tuner eta-backtest -trace-dir $(TRACES) -bench

fuzz: ## run each fuzz target for FUZZTIME
	@for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

postgres: ## start a throwaway local Postgres unless one already answers
	@scripts/postgres-local.sh

chromium: ## install Debian's chromium for the dashboard's browser tests unless one is there
	@scripts/chromium-local.sh

postgres-stop: ## stop the Postgres that `make postgres` started
	@scripts/postgres-local.sh stop

DEMO_FLAGS ?=
# The demo's database: DATABASE_URL with its database name replaced by DEMO_DB.
DEMO_URL = $$(echo '$(DATABASE_URL)' | sed 's,/[^/?]*\(?\|$$\),/$(DEMO_DB)\1,')

demo-db: postgres
	@psql "$(DATABASE_URL)" -tAc "SELECT 1 FROM pg_database WHERE datname = '$(DEMO_DB)'" | grep -q 1 || \
	  psql "$(DATABASE_URL)" -qc 'CREATE DATABASE "$(DEMO_DB)"'

demo: demo-db ## the whole loop on this machine: cluster, scheduler, collector, tuner; before/after summary (~4 min)
	$(GO) build -o $(BIN)/demo ./cmd/demo
	$(BIN)/demo -database-url "$(DEMO_URL)" $(DEMO_FLAGS)

demo-smoke: demo-db ## the demo's short mode (~3 min), same summary
	$(GO) build -o $(BIN)/demo ./cmd/demo
	$(BIN)/demo -short -database-url "$(DEMO_URL)" $(DEMO_FLAGS)

clean: ## remove build outputs
	rm -rf $(BIN)
