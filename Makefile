# The front door. `make run` and `make test` are the two commands of the README.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
STACK := scripts/devstack.sh
# Exports DATABASE_URL and REDIS_URL of the private Postgres and Redis
# (the dev profile, or the ci profile when CI=true).
STACK_ENV = eval "$$($(STACK) env)"
# The test-only npm package (avsc) the schemas interop tests run.
AVSC_DIR := schemas/testdata/avsc

.PHONY: run test bench screenshots lint docs sqlc build web tools stack-up stack-down stack-status clean clean-data

## run: start Postgres and Redis, then the whole platform (`proliferate dev`) with the dashboard at http://127.0.0.1:8080/
run: build stack-up tools
	@$(STACK_ENV); exec bin/proliferate dev

## test: every test, with the race detector, against real Postgres, Redis and Kafka
test: stack-up tools web
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	@$(STACK_ENV); $(GO) test -race -count=1 -timeout 15m ./...

## bench: the hot-path benchmarks, reported as ratios to baselines measured in the same run
bench: stack-up tools web
	@mkdir -p bench
	@$(STACK_ENV); $(GO) test -run '^$$' -bench . -benchmem -count 3 -timeout 30m \
		./consumers/ ./producers/outbox/ ./schemas/ ./api/identity/ ./api/orgs/ ./consumers/triggerprocessor/ ./consumers/runstages/ ./gateway/ ./gateway/hub/ ./producers/ingest/ ./app/ ./internal/sandbox/local/ ./internal/actions/ ./internal/actions/invocations/ ./consumers/billingledger/ ./consumers/toolmaterializer/ ./consumers/sessionmaterializer/ ./consumers/actionmaterializer/ ./internal/llmproxy/ ./web/ | tee bench/raw.txt
	@$(GO) run ./internal/benchreport < bench/raw.txt | tee bench/report.txt

## screenshots: the browser tests' screenshots of every main screen (bench/screenshots) and the README's (docs/screenshots, 1280x800)
SCREENSHOT_TESTS := TestDashboardSignupOnboardingAndPhoneLayout|TestSessionChatStreamCancelAndPausedHistory|TestSessionsListPagingFiltersAndPeek|TestAutomationWebhookRunAndInbox|TestAutomationActionApprovedInTheInbox|TestSettingsSecretsImportAPIKeyAndFieldErrors
README_SHOTS := sessions-list session-timeline inbox-approval automation-edit settings-billing
screenshots: stack-up tools web
	@mkdir -p bench/screenshots
	@$(STACK_ENV); SCREENSHOT_DIR=$(CURDIR)/bench/screenshots $(GO) test -count=1 -p 1 -timeout 20m -run '^($(SCREENSHOT_TESTS))$$' ./web/
	@$(GO) run ./scripts/readmeshots -from bench/screenshots -to docs/screenshots $(README_SHOTS)
	@if command -v optipng >/dev/null; then optipng -quiet -o2 $(README_SHOTS:%=docs/screenshots/%.png); \
	else echo "optipng is not installed (apt-get install optipng): the PNGs are Go's best compression only"; fi

## lint: gofmt, go vet and staticcheck
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

## docs: regenerate docs/topics.md (catalog + schemas), docs/config.md (settings) and web/src/protocol.ts (the gateway's wire types)
docs:
	$(GO) run ./cmd/proliferate topics docs > docs/topics.md
	$(GO) run ./cmd/proliferate config --markdown > docs/config.md
	$(GO) run ./gateway/protocol/tsgen > web/src/protocol.ts

## sqlc: regenerate the typed Go of every owner's queries/*.sql (sqlc.yaml; sqlc pinned by go.mod's tool directive, built without cgo)
sqlc:
	CGO_ENABLED=0 $(GO) tool sqlc generate

build: web
	$(GO) build -o bin/proliferate ./cmd/proliferate

## web: build the dashboard (web/, TypeScript + Preact + Vite; npm from the registry, pinned by its lockfile) into web/dist, which the binary embeds
WEB_SRC := $(shell find web/src -type f 2>/dev/null) web/index.html web/vite.config.ts web/tsconfig.json
web: web/dist/index.html
web/dist/index.html: web/node_modules/.installed $(WEB_SRC)
	npm run --prefix web --silent build
web/node_modules/.installed: web/package.json web/package-lock.json
	npm ci --prefix web --no-audit --no-fund --loglevel=error
	@touch $@

stack-up:
	@$(STACK) up

## tools: install the pinned coding agent (OpenCode, from npm) into a shared cache, the sandbox jail (bubblewrap, socat; from Debian when missing) and the test-only npm package avsc
tools: $(AVSC_DIR)/node_modules/.installed
	@scripts/opencode.sh install >/dev/null
	@scripts/sandbox-tools.sh install

# avsc, the npm Avro library the schemas tests decode our records with (a
# reader that shares nothing with our code); pinned by its package-lock.json
# and reinstalled only when that or package.json changes.
$(AVSC_DIR)/node_modules/.installed: $(AVSC_DIR)/package.json $(AVSC_DIR)/package-lock.json
	npm ci --prefix $(AVSC_DIR) --no-audit --no-fund --loglevel=error
	@touch $@

stack-down:
	@$(STACK) down

stack-status:
	@$(STACK) status

# .data: the data dir of older versions, inside the checkout.
clean:
	rm -rf bin bench .data

# The default data dirs (SANDBOX_DATA_DIR, BLOB_DIR, BROKER_DATA_DIR), shared
# by the checkouts of this machine.
clean-data:
	rm -rf /var/tmp/proliferate/data
