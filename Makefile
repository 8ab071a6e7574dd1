# kubesteer: `make run` starts everything on a local real control plane; `make test` runs every test.
SHELL := /bin/bash
include versions.env
export K8S_VERSION KWOK_VERSION HELM_VERSION ETCD_VERSION DISTRIBUTION_VERSION KREW_VERSION

KUBESTEER_CACHE ?= $(HOME)/.cache/kubesteer
export KUBESTEER_CACHE
BIN := $(KUBESTEER_CACHE)/bin
KUBECONFIG_FILE := $(CURDIR)/.kubesteer/kubeconfig
CARGO ?= cargo
# The project image (make image, make deploy) and the real node's pod sandbox image.
IMG ?= kubesteer:dev
IMAGE_TAR ?= .kubesteer/image.tar
PAUSE_IMG ?= localhost/kubesteer-pause:3.10
PAUSE_TAR ?= .kubesteer/pause.tar

.PHONY: all build plugin control-plane test-release krew-tool monitoring-tools cluster-up cluster-down manifests install run run-once test-run deploy undeploy test fmt-check clippy doc-check unit e2e bench-webhook bench-webhook-memory bench-webhook-memory-chart bench-controller bench-lease bench-stores bench-verbs fuzz keda platform soak

all: build

build:
	$(CARGO) build --workspace --all-targets

## plugin: build the kubectl plugin (kubesteer/plugin/) and install kubectl-kubesteer into $(PLUGIN_ROOT)/bin;
## with that on PATH, `kubectl kubesteer --help` runs it. Cargo's cache for it is target/.
PLUGIN_ROOT ?= $(HOME)/.local
plugin:
	$(CARGO) install --path kubesteer/plugin --locked --root $(PLUGIN_ROOT) --target-dir $(CURDIR)/target
	@echo "installed $(PLUGIN_ROOT)/bin/kubectl-kubesteer; with $(PLUGIN_ROOT)/bin on PATH: kubectl kubesteer --help"

## control-plane: build the pinned Kubernetes, kwok, etcd and helm binaries into $(BIN) (cached).
control-plane:
	hack/build-control-plane.sh all

## monitoring-tools: promtool, Prometheus and the ServiceMonitor/PrometheusRule CRDs at their pins
## (cached), for the e2e tests of the chart's alerts, dashboard and scrape
## (tests/e2e/install/monitoring.rs, savings.rs).
monitoring-tools:
	hack/build-control-plane.sh monitoring

cluster-up: control-plane
	hack/cluster.sh up

cluster-down:
	hack/cluster.sh down

## manifests: regenerate the CRDs from api/ into charts/kubesteer/files/crds/.
manifests:
	$(CARGO) run -q -p kubesteer-api --bin crdgen -- charts/kubesteer/files/crds

## install: apply the CRDs to the cluster of $$KUBECONFIG (default: the local one). A running
## webhook points the Scaler CRD's conversion back at itself within a check round.
install:
	hack/crds.sh $(BIN)/kubectl $(if $(KUBECONFIG),,--kubeconfig $(KUBECONFIG_FILE))

## run: the local control plane "kubesteer" (.kubesteer/) with its real node, the image built and
## installed by the chart, the samples applied; in the foreground. Ctrl-C tears down what it
## started (a cluster that was already up stays, minus what run added). MODE=host runs the two
## binaries on the host instead (no root needed).
MODE ?= cluster
run: control-plane
	MODE=$(MODE) IMG=$(IMG) hack/run.sh

## run-once: `make run` exactly as a user runs it, without the foreground (KUBESTEER_RUN_ONCE=1),
## on a cluster of its own ("kubesteer-run", .kubesteer/run/): everything up, every sample Ready,
## the README's try-it lines run, then torn down. `make test` runs it last (hack/test-run.sh), and
## a run that fails after it (the cluster kept, the failed step explained), and a `make run | tee`
## stopped by Ctrl-C (its cluster torn down).
run-once:
	KUBESTEER_RUN_ONCE=1 KUBESTEER_CLUSTER=kubesteer-run KUBESTEER_STATE=$(CURDIR)/.kubesteer/run \
		$(MAKE) --no-print-directory run MODE=$(MODE) IMG=$(IMG)

test-run: control-plane
	hack/test-run.sh

## test-release: `make release` checked as a platform team adopts it, on a cluster of its own
## (kubesteer-release): SHA256SUMS, helm lint, `kubectl krew install` of the plugin archive, and
## the plain manifests applied on the empty cluster, the image pulled from its registry.
test-release: control-plane krew-tool
	hack/test-release.sh

## krew-tool: krew at its pin (versions.env), built from the Go module proxy and cached.
krew-tool:
	hack/build-control-plane.sh krew

## deploy: build $(IMG), push it and the chart to the local cluster's registry, helm upgrade
## --install the chart from there (oci://, by version); the real node pulls the image.
deploy: image
	hack/deploy.sh up $(IMG)

## undeploy: helm uninstall the release that `make deploy` installed.
undeploy:
	hack/deploy.sh down

## test: every test (hack/test.sh): fmt-check, clippy, doc-check, unit, e2e, test-release and
## test-run, in that order, with the image's build for the e2e tests started first, beside them.
test:
	hack/test.sh

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## doc-check: the workspace's own docs build with no rustdoc warning (broken or private links).
doc-check:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

## unit: every crate's tests but the e2e ones (the image's multi-call binary's too, in kubesteer/),
## and the e2e helpers' own unit tests (no cluster).
unit:
	$(CARGO) test --workspace --exclude kubesteer-tests
	$(CARGO) test -p kubesteer-tests --lib

## e2e: end-to-end tests on a control plane of their own, "kubesteer-e2e" (.kubesteer/e2e/, with its
## own real node as root), started and torn down by hack/e2e.sh (KUBESTEER_KEEP_CLUSTER=1 keeps it);
## `make run`'s cluster is never touched, so both run side by side.
e2e: control-plane monitoring-tools keda platform
	hack/e2e.sh

## soak: the fault soak (tests/e2e/soak/) on the e2e cluster with the chart's pods: faults for
## DURATION (default 30m; every kind at least 5 times), SEED to repeat a run's plan, actions and
## faults, TARGETS targets (default 200). The history and report go to target/e2e/soak/; `make
## test` runs a short one (5 minutes, 40 targets) in its e2e tests.
DURATION ?= 30m
TARGETS ?= 200
SEED ?=
soak: control-plane monitoring-tools keda
	DURATION=$(DURATION) TARGETS=$(TARGETS) SEED=$(SEED) hack/soak.sh

## keda: the real KEDA operator (pinned in hack/keda.sh) built from the Go module proxy and cached
## under ~/.cache/kubesteer (8-17 min the first time), for the Scaler's KEDA e2e test.
keda:
	hack/keda.sh

## platform: cert-manager and the Prometheus Operator (pinned in versions.env) built from the Go
## module proxy and cached under ~/.cache/kubesteer (4-7 min each the first time), for the e2e
## tests of the chart's certManager mode and monitoring (tests/e2e/install/platform.rs).
platform:
	hack/cert-manager.sh
	hack/prometheus-operator.sh

## bench-webhook: load benchmark of the webhook; writes bench/results/webhook.json.
## BENCH_SUBJECT=peers: kubesteer and the controller-runtime peer (bench/peers, needs Go) alternately,
## BENCH_REPEATS runs each (3); medians and ratios in bench/results/webhook-peers.json.
## BENCH_SUBJECT=allocators: the webhook on jemalloc, on jemalloc made lean at start, and on glibc's
## malloc, BENCH_REPEATS runs each (3); RSS and rates in bench/results/webhook-allocators.json.
bench-webhook: control-plane
	bench/scripts/webhook.sh

## bench-webhook-memory: 64 concurrent 4 MiB bodies against the release webhook beside a keep-alive
## client's reviews (RSS peak, p50/p99); writes bench/results/webhook-memory.json.
bench-webhook-memory:
	bench/scripts/webhook-memory.sh

## bench-webhook-memory-chart: the same flood for a minute at the chart's webhook pods on the e2e
## cluster's real node (their cgroups' peak memory); writes bench/results/webhook-memory-chart.json.
bench-webhook-memory-chart:
	bench/scripts/webhook-memory-chart.sh

## bench-controller: controller benchmark on a cluster of its own (KUBESTEER_CLUSTER=bench);
## writes bench/results/controller.json.
## BENCH_SUBJECT=peers: convergence only; ceiling, kubesteer, the Go apply peer with kubebuilder's
## defaults and tuned, the Go peer in the kubebuilder tutorial's pattern, and (when named) the owned and
## writes lines (BENCH_PEER_SUBJECTS picks),
## each on a fresh cluster, BENCH_REPEATS runs (3), with requests per Memcached and per no-op
## resync from the audit log; bench/results/controller-peers.json.
## BENCH_PHASES=fleet: on a fresh cluster, one selector Scaler per namespace switching BENCH_FLEET_NAMESPACES
## (100) x BENCH_FLEET_PER_NAMESPACE (100) Deployments to 0 at one boundary, then Hold setting back
## BENCH_FLEET_HOLD (1,000) scale-ups; bench/results/controller-fleet.json.
bench-controller: control-plane
	bench/scripts/controller.sh

## bench-verbs: what each of kubesteer's writes costs the apiserver (and etcd) in CPU, by verb: POST
## against an apply that creates, a JSON patch of the status against an apply of it; on a cluster of
## its own with the controller-manager paused; writes bench/results/apiserver-verbs.json.
bench-verbs: control-plane
	bench/scripts/verbs.sh

## bench-stores: what the controller's caches take per object, kept as it keeps them and parsed,
## BENCH_STORES_COUNT (20,000) copies of bench/bodies/stores/ each, in process (no cluster), with
## jemalloc returning freed pages at once; writes bench/results/controller-stores.json.
## bench-lease: kubesteer's leader election against kube-lease-manager on a real etcd and kube-apiserver
## (started and stopped by the bench): failover, handover, requests, a partitioned leader.
bench-lease: control-plane
	cargo build -p kubesteer-bench --bin kubesteer-bench-lease
	target/debug/kubesteer-bench-lease run --rounds $${BENCH_LEASE_ROUNDS:-5} --steady-secs 60 --stall-secs 15

bench-stores:
	cargo build --release -p kubesteer-bench
	_RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0 target/release/kubesteer-bench stores --count $${BENCH_STORES_COUNT:-20000} > bench/results/controller-stores.json.tmp
	mv bench/results/controller-stores.json.tmp bench/results/controller-stores.json

## fuzz: the review-path fuzz target (webhook/fuzz) on nightly for $(FUZZ_RUNS) inputs, one job.
## New inputs go to $(FUZZ_CORPUS); the committed seeds in webhook/fuzz/corpus/review stay as
## they are (`cargo +nightly fuzz cmin` there to fold new ones in). Not part of `make test`:
## its corpus replay runs in `make unit` (webhook/tests/webhook/corpus.rs).
FUZZ_RUNS ?= 10000000
FUZZ_CORPUS ?= webhook/fuzz/target/corpus-review
FUZZ_ARGS ?=
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	mkdir -p $(FUZZ_CORPUS)
	$(CARGO) +nightly fuzz run --fuzz-dir webhook/fuzz review $(FUZZ_CORPUS) webhook/fuzz/corpus/review -- \
		-runs=$(FUZZ_RUNS) -timeout=1 -rss_limit_mb=2048 -print_final_stats=1 $(FUZZ_ARGS)

## image: the kubesteer image (one static multi-call binary, FROM scratch) built offline with buildah as
## $(IMG) in the local containers storage, exported to $(IMAGE_TAR) for `ctr images import`.
## pause-image: a pod sandbox image built from hack/pause/pause.c, exported to $(PAUSE_TAR).
.PHONY: image pause-image release

## release: the release's artifacts into $(DIST): the image as an OCI archive, the packaged chart,
## plain manifests (kubesteer.yaml), the plugin's archive, the krew manifest with its sha256 and
## SHA256SUMS (hack/release.sh). VERSION is the workspace version (Cargo.toml), checked.
VERSION ?= $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
DIST ?= $(CURDIR)/dist
release: control-plane
	hack/release.sh $(VERSION) $(DIST)

image:
	hack/image.sh image $(IMG) $(IMAGE_TAR)

pause-image:
	hack/image.sh pause $(PAUSE_IMG) $(PAUSE_TAR)
