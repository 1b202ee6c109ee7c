# Lucius — two commands do all set-up on a fresh machine:
#   make up     run the whole suite on the embedded default (PostgreSQL + PostgreSQL bus)
#   make test   run every test (unit, integration, end to end), as CI does
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO  ?= go
BIN := $(CURDIR)/.build/bin
export PATH := $(BIN):$(PATH)

# Pinned tool versions. buf comes from npm (a prebuilt binary; `go install`
# is the fallback); the protoc plugins and grpcurl from the Go module proxy.
BUF_VERSION                := 1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION       := v2.32.0
GRPCURL_VERSION            := v1.9.4
GOLANGCI_LINT_VERSION      := v2.15.0
GNOSTIC_VERSION            := v0.7.1
TOOLS_STAMP := $(BIN)/.tools-$(BUF_VERSION)-$(PROTOC_GEN_GO_VERSION)-$(PROTOC_GEN_GO_GRPC_VERSION)-$(GRPC_GATEWAY_VERSION)-$(GRPCURL_VERSION)-$(GNOSTIC_VERSION)

MODULES  := contract base bus core sdk/worker services/gateway services/orchestrator services/reconciler services/scheduler services/worker-skeleton tools
# deploy/check (the chart's and dashboards' checks, on the Kubernetes, KEDA,
# Prometheus Operator and Prometheus modules) is its own module outside
# go.work: in the workspace its requirements would raise versions the
# services build with (prometheus/client_golang, klauspost/compress, …).
# It runs with GOWORK=off.
CHECK_MODULE := deploy/check
PACKAGES := $(addprefix ./,$(addsuffix /...,$(MODULES)))
SERVICES := gateway orchestrator reconciler scheduler
TEST_TIMEOUT ?= 30m

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# The Node.js test servers run from .build/<tool>, installed with `npm ci`
# from tools/<tool>'s committed lock file: the Service Bus test broker
# (tools/sbbroker, Node + rhea) and Azurite, the Azure Storage emulator
# (tools/azurite). base/nodeproc does the same `npm ci` itself when one is
# missing (base/sbtest, base/azuritetest).
.PHONY: sbbroker azurite
sbbroker: .build/sbbroker/installed-lock.json ## install the Service Bus test broker's pinned npm packages into .build/sbbroker
azurite: .build/azurite/installed-lock.json ## install Azurite (pinned npm package) into .build/azurite
.PHONY: spectral tsclient swaggerui
spectral: .build/spectral/installed-lock.json ## install Spectral, the OpenAPI linter (pinned npm package), into .build/spectral
tsclient: .build/tsclient/installed-lock.json ## install openapi-typescript, openapi-fetch and typescript (pinned) into .build/tsclient
swaggerui: .build/swaggerui/installed-lock.json ## install swagger-ui-dist (pinned), the viewer the gateway embeds at /docs, into .build/swaggerui

.build/%/installed-lock.json: tools/%/package.json tools/%/package-lock.json
	@rm -rf .build/$* && mkdir -p .build/$*
	@cp tools/$*/package.json tools/$*/package-lock.json .build/$*/
	cd .build/$* && npm ci --no-audit --no-fund --loglevel=error
	@cp tools/$*/package-lock.json $@

.PHONY: tools
tools: $(TOOLS_STAMP) ## install pinned buf, protoc plugins and grpcurl into .build/bin

$(TOOLS_STAMP):
	@mkdir -p $(BIN)
	@echo "installing buf $(BUF_VERSION)"
	@if npm install --no-save --no-audit --no-fund --loglevel=error --prefix .build/npm @bufbuild/buf@$(BUF_VERSION) >/dev/null 2>&1; then \
		ln -sf ../npm/node_modules/.bin/buf $(BIN)/buf; \
	else \
		GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@v$(BUF_VERSION); \
	fi
	@echo "installing protoc plugins and grpcurl"
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(BIN) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	GOBIN=$(BIN) $(GO) install github.com/google/gnostic/cmd/protoc-gen-openapi@$(GNOSTIC_VERSION)
	GOBIN=$(BIN) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	@rm -f $(BIN)/.tools-* && touch $@

# golangci-lint runs the linters of .golangci.yml (errcheck, staticcheck,
# revive, gosec, …) on every module; each rule left off there says why.
GOLANGCI := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
$(GOLANGCI):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv $(BIN)/golangci-lint $@

.PHONY: golangci
golangci: $(GOLANGCI) ## golangci-lint with .golangci.yml (errcheck, staticcheck, revive, gosec, …) on every module
	@for m in $(MODULES); do echo "golangci-lint $$m"; (cd $$m && $(GOLANGCI) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

.PHONY: protodeps
protodeps: ## print third-party .proto imports from pinned Go modules into .build/protodeps
	$(GO) run ./tools/cmd/protoimports -out .build/protodeps

# The OpenAPI document: protoc-gen-openapi's output (in <dir>/.build/openapi)
# finished by tools/openapidoc with the contract's version (contract/VERSION)
# and proto/'s descriptors. $(call openapi,<buf generate's output root>,<document>)
openapi = buf build --as-file-descriptor-set -o $(1)/.build/openapi/lucius.binpb proto && \
	$(GO) run ./tools/cmd/lucius-openapi -in $(1)/.build/openapi/openapi.yaml -descriptors $(1)/.build/openapi/lucius.binpb \
		-version-file contract/VERSION -out $(2)

.PHONY: generate
generate: tools protodeps ## regenerate contract/ (Go, gRPC, grpc-gateway, OpenAPI) from proto/
	buf generate
	$(call openapi,.,contract/openapi/lucius.openapi.json)

.PHONY: check-generated
check-generated: tools protodeps ## fail when contract/ is not what proto/ generates
	@rm -rf .build/gencheck && mkdir -p .build/gencheck
	buf generate -o .build/gencheck
	@mkdir -p .build/gencheck/contract/openapi
	$(call openapi,.build/gencheck,.build/gencheck/contract/openapi/lucius.openapi.json)
	@diff -r .build/gencheck/contract/lucius contract/lucius && diff .build/gencheck/contract/openapi/lucius.openapi.json contract/openapi/lucius.openapi.json \
		|| { echo "generated code is stale: run 'make generate' and commit the result"; exit 1; }

# Spectral (pinned in tools/spectral) lints the document the gateway serves
# at /openapi.json (contract/openapi/lucius.openapi.json, embedded as is) with
# spectral:oas and our rules (tools/spectral/ruleset.yaml): a warning fails too.
.PHONY: openapi-lint
openapi-lint: spectral ## lint the OpenAPI document with Spectral (spectral:oas + tools/spectral/ruleset.yaml); any warning fails
	.build/spectral/node_modules/.bin/spectral lint --fail-severity=warn -r tools/spectral/ruleset.yaml contract/openapi/lucius.openapi.json

# The gateway's /docs viewer: swagger-ui-dist's files, pinned in
# tools/swaggerui, committed under services/gateway/internal/docs/web/swagger-ui
# (embedded, so the binary needs neither npm nor the internet).
SWAGGER_UI_DIR   := services/gateway/internal/docs/web/swagger-ui
SWAGGER_UI_FILES := swagger-ui-bundle.js swagger-ui.css LICENSE NOTICE
.PHONY: swaggerui-files check-swaggerui
swaggerui-files: swaggerui ## copy the pinned swagger-ui-dist's files into the gateway's /docs viewer
	@mkdir -p $(SWAGGER_UI_DIR)
	for f in $(SWAGGER_UI_FILES); do cp .build/swaggerui/node_modules/swagger-ui-dist/$$f $(SWAGGER_UI_DIR)/$$f; done
check-swaggerui: swaggerui ## fail when the /docs viewer's files are not the pinned swagger-ui-dist's
	@for f in $(SWAGGER_UI_FILES); do cmp -s .build/swaggerui/node_modules/swagger-ui-dist/$$f $(SWAGGER_UI_DIR)/$$f \
		|| { echo "$(SWAGGER_UI_DIR)/$$f is not swagger-ui-dist's: run 'make swaggerui-files' and commit it"; exit 1; }; done

# deploy/azure/servicebus.bicep is generated like contract/; tools/bicep's test
# (in make test) fails when it is stale.
.PHONY: bicep
bicep: ## regenerate deploy/azure/servicebus.bicep from bus/topology
	@mkdir -p .build
	$(GO) run ./tools/cmd/lucius-bicep > .build/servicebus.bicep && mv .build/servicebus.bicep deploy/azure/servicebus.bicep

# The contract must stay compatible with what has landed and with its last
# release: the highest contract/vX.Y.Z tag (no tag, no second comparison).
# The third-party imports are not in git, so build an image of each base's
# proto/ in a temporary worktree (with today's printed imports) and compare
# against it.
BREAKING_AGAINST ?= main
CONTRACT_TAG = $(shell git tag -l 'contract/v*' --sort=-v:refname | head -1)
.PHONY: breaking
breaking: tools protodeps ## buf breaking against $(BREAKING_AGAINST)'s proto/ and the last contract/v* tag's (each skipped when it has none)
	@buf build -o .build/current.binpb; \
	for ref in $(BREAKING_AGAINST) $(CONTRACT_TAG); do \
		if ! git cat-file -e "$$ref:proto" 2>/dev/null; then echo "breaking: $$ref has no proto/; nothing to compare"; continue; fi; \
		rm -rf .build/against .build/against.binpb; git worktree prune; \
		git worktree add --detach --force .build/against "$$ref" >/dev/null 2>&1; \
		mkdir -p .build/against/.build && cp -r .build/protodeps .build/against/.build/protodeps; \
		(cd .build/against && buf build -o ../against.binpb); status=$$?; \
		git worktree remove --force .build/against; \
		[ $$status -eq 0 ] && buf breaking .build/current.binpb --against .build/against.binpb && echo "breaking: compatible with $$ref" || exit 1; \
	done

.PHONY: lint
lint: tools protodeps ## buf lint, gofmt and go vet
	buf lint
	@unformatted=$$(gofmt -l $(MODULES) $(CHECK_MODULE)); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PACKAGES)
	cd $(CHECK_MODULE) && GOWORK=off $(GO) vet ./...

# The deployment's checks: helm and promtool pinned (go install, like the
# protoc plugins), the chart linted and rendered for the default and the
# production values, the rules checked, then deploy/check's Go tests: every
# rendered manifest decoded strictly against the Kubernetes, KEDA and
# Prometheus Operator API types with the chart's promises asserted, the
# dashboards' and rules' metric list current (tools/e2e scrapes a real
# suite for each), the Dockerfile and docker-compose.yml against the
# Makefile. helm built by go install assumes Kubernetes 1.20: render for
# KUBE_VERSION.
HELM_VERSION     := v3.22.0
PROMTOOL_VERSION := v0.316.0
KUBE_VERSION     := 1.31.0
CHART            := deploy/helm/lucius
DEPLOY_TOOLS_STAMP := $(BIN)/.deploy-tools-$(HELM_VERSION)-$(PROMTOOL_VERSION)

.PHONY: deploy-tools
deploy-tools: $(DEPLOY_TOOLS_STAMP) ## install pinned helm and promtool into .build/bin

$(DEPLOY_TOOLS_STAMP):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	GOBIN=$(BIN) $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	@rm -f $(BIN)/.deploy-tools-* && touch $@

.PHONY: deploy-check
deploy-check: deploy-tools ## lint and render the Helm chart, check the alert rules, decode and check every manifest, the dashboards' metrics and the image
	@mkdir -p .build/deploy
	helm lint --strict $(CHART) --kube-version $(KUBE_VERSION)
	helm lint --strict $(CHART) -f $(CHART)/values-production.yaml --kube-version $(KUBE_VERSION)
	helm template lucius $(CHART) --namespace lucius --kube-version $(KUBE_VERSION) > .build/deploy/default.yaml
	helm template lucius $(CHART) --namespace lucius --kube-version $(KUBE_VERSION) -f $(CHART)/values-production.yaml > .build/deploy/production.yaml
	promtool check rules deploy/observability/prometheus/*.yaml
	cd $(CHECK_MODULE) && GOWORK=off HELM=$(BIN)/helm $(GO) test -count=1 ./...

.PHONY: build
build: ## build the service binaries and dev tools into .build/bin
	@mkdir -p $(BIN)
	@for s in $(SERVICES); do $(GO) build -o $(BIN)/$$s ./services/$$s/cmd/$$s; done
	$(GO) build -o $(BIN)/worker ./services/worker-skeleton/cmd/worker
	$(GO) build -o $(BIN)/lucius ./tools/cmd/lucius
	$(GO) build -o $(BIN)/lucius-up ./tools/cmd/lucius-up
	$(GO) build -o $(BIN)/lucius-bench ./tools/cmd/lucius-bench
	$(GO) build -o $(BIN)/lucius-chaos ./tools/cmd/lucius-chaos
	$(GO) build -o $(BIN)/withpg ./tools/cmd/withpg

# The console's browser test (tools/e2e TestConsoleInHeadlessChromium) drives
# Debian's chromium; .ci/chromium installs it with apt-get when it is missing.
.PHONY: chromium
chromium: ## install Debian's chromium for the console's browser test, when missing
	@.ci/chromium >/dev/null

.PHONY: test
# The end-to-end suites (tools/e2e: whole stacks of real processes, timing
# real sweepers and leases) run after every other package, not beside them,
# so a 2-core machine is not shared with a dozen other test binaries.
E2E := ./tools/e2e/...
# Then the flows the production transport must carry run again on Azure
# Service Bus (LUCIUS_E2E_BUS=servicebus: each stack starts its own Service
# Bus test broker): OCR→EMBEDDING→SIS, a conditional DAG, the 1,000-way
# fan-out, a runbook, bus dead letters and stranded requests, retries and
# replay, and the short chaos run.
E2E_SERVICEBUS := TestChaosShort$$|TestOCREmbeddingSISReachesSucceededOverRESTAndGRPC|TestConditionalWorkflowTakesEachBranchByInput|TestThousandWayFanOutCompletes|TestRunbookRunsABatchOnCompressedTime|TestBusDeadLettersAreListedAndStrandedRequestsRun|TestUnacknowledgedStepIsRetriedDeadLetteredAndReplayed
test: check-generated openapi-lint check-swaggerui breaking lint golangci build sbbroker azurite chromium tsclient deploy-check ## run every test, then each fuzz target for FUZZTIME, against a PostgreSQL the run starts itself (or DATABASE_URL)
	LUCIUS_BIN_DIR=$(BIN) $(BIN)/withpg -dir .build/testpg -- \
		bash -c 'set -e; $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list $(PACKAGES) | grep -v /tools/e2e); \
			$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(E2E); \
			LUCIUS_E2E_BUS=servicebus $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run "$(E2E_SERVICEBUS)" $(E2E) ./tools/chaos/; \
			GO=$(GO) .ci/fuzz $(FUZZTIME)'

# The fuzz targets are listed in .ci/fuzz-targets (one "package target" a
# line; .ci/fuzz fails when a func Fuzz… is missing there), their seed corpora
# under each package's testdata/fuzz/<target>/. `make test` runs each briefly.
FUZZTIME ?= 3s
.PHONY: fuzz
fuzz: build ## run each fuzz target in .ci/fuzz-targets for FUZZTIME (default 3s): make fuzz FUZZTIME=1m
	GO=$(GO) $(BIN)/withpg -dir .build/fuzzpg -- .ci/fuzz $(FUZZTIME)

.PHONY: up
up: build ## run the whole suite in the foreground; Ctrl-C stops it
	$(BIN)/lucius-up -bin $(BIN) -data .lucius

.PHONY: bench
# `make bench` runs the job benchmark, then the definition-size one;
# BENCH_DEFSIZE=0 skips the latter.
BENCH_DEFSIZE ?= 1
bench: build ## submit N three-step jobs to a fresh suite and print jobs/s and submit→SUCCEEDED latency, then the definition-size benchmark
	$(BIN)/lucius-bench -bin $(BIN) $(BENCH_FLAGS)
	@if [ "$(BENCH_DEFSIZE)" != 0 ]; then echo "lucius-bench -defsize"; $(BIN)/lucius-bench -bin $(BIN) -defsize; fi

.PHONY: bench-defsize
bench-defsize: build ## what a workflow definition's size costs: 15,000 nodes refused by default; 1k/5k/15k nodes validated, registered, submitted, with peak RSS per process
	$(BIN)/lucius-bench -bin $(BIN) -defsize $(BENCH_FLAGS)

.PHONY: chaos
chaos: build ## SIGKILL and restart processes (and PostgreSQL once) under 500 three-step jobs, check the ledger, print the report
	$(BIN)/lucius-chaos -bin $(BIN) $(CHAOS_FLAGS)

# make members RUNBOOK=contoso-mailbox-migration CSV=members.csv [VERSION=3] [REPLACE=1] [GATEWAY=host:port]
RUNBOOK ?=
CSV     ?=
VERSION ?= 0
REPLACE ?=
GATEWAY ?= 127.0.0.1:9090
.PHONY: members
members: ## load a runbook's member data from a CSV: RUNBOOK=name CSV=file [VERSION=n] [REPLACE=1] [GATEWAY=host:port]
	@if [ -z "$(RUNBOOK)" ] || [ -z "$(CSV)" ]; then \
		echo "usage: make members RUNBOOK=<name> CSV=<file.csv> [VERSION=<n>, 0: active] [REPLACE=1] [GATEWAY=127.0.0.1:9090]"; exit 2; fi
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/lucius ./tools/cmd/lucius
	LUCIUS_ADDR='$(GATEWAY)' LUCIUS_TOKEN="$${LUCIUS_TOKEN:-$$($(BIN)/lucius token --role operator)}" \
		$(BIN)/lucius members load '$(RUNBOOK)' '$(CSV)' --version '$(VERSION)' $(if $(filter 1 true yes,$(REPLACE)),--replace)

.PHONY: clean
clean: ## remove build outputs and the local cluster
	rm -rf .build .lucius
