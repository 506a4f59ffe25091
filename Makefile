# nodeagent: a Kubernetes node agent that replaces the kubelet.
#
#   make up      bring up a local cluster (stock control plane, containerd, registry) with nodeagent as its node
#   make down    stop it and remove everything it made
#   make test    unit tests, the end-to-end suites on one shared cluster, then the conformance and bench smoke runs
#   make build   build bin/nodeagent and the kubectl plugin bin/kubectl-nodeagent (kubectl nodeagent timeline|why POD)
#   make bench   pod startup and footprint, nodeagent side by side with the kubelet (BENCHMARKS.md)
#   make bench-pvc    the same, each pod with a fresh PVC of the hostpath CSI driver mounted
#   make bench-micro  testing.B benchmarks of the agent's hot paths
#   make conformance        the upstream conformance suite against nodeagent (docs/conformance.md)
#   make conformance-smoke  a few fast conformance specs; fails on any failure
#   make kubeadm      kubeadm init and two kubeadm joins with nodeagent as every node's kubelet

GO      ?= go
# Nothing in the project uses cgo, and the binaries the harness builds (the agent, the
# images) are static: every go command here builds without it, so the tests and those
# binaries share one build of each package instead of compiling the client libraries twice.
export CGO_ENABLED ?= 0
HARNESS  = $(GO) run ./test/cmd/harness
E2E_FLAGS ?=
PREBUILD_CONFORMANCE ?=

.PHONY: all build up down test unit packages e2e e2e-tls kubeadm upstream fmt vet bench bench-smoke bench-pvc bench-micro conformance conformance-smoke soak

all: build

# grpcnotrace: gRPC without golang.org/x/net/trace, whose debug pages link html/template;
# its reflective method calls make the linker keep every exported method of every type,
# 10 MB of the binary's 51 (cmd/nodeagent's TestBinaryKeepsNoMethodForReflection watches for it).
AGENT_TAGS = grpcnotrace

build:
	CGO_ENABLED=0 $(GO) build -tags $(AGENT_TAGS) -o bin/nodeagent ./cmd/nodeagent
	CGO_ENABLED=0 $(GO) build -o bin/kubectl-nodeagent ./cmd/kubectl-nodeagent

up:
	@$(HARNESS) up

down:
	@$(HARNESS) down

# Build (or find in the cache) the upstream binaries and containerd.
upstream:
	@$(HARNESS) build

# The conformance smoke run needs the upstream e2e.test (about 4 minutes of a cold build)
# and external-snapshotter (under a minute, after the upstream build):
# make test builds them in the background, at the lowest priority, while the suites after
# the lifecycle suite mostly wait (the lifecycle suite's memory-pressure test must not
# share the machine with a linker); the smoke run waits for that build if it is still on.
# (Earlier in the main e2e suite, beside its tests, that build slowed them by as much as it
# took: the machine is busy there too.)
test: unit
	$(MAKE) e2e PREBUILD_CONFORMANCE=1
	$(MAKE) conformance-smoke
	$(MAKE) bench-smoke

# The packages first: the real-kernel unit tests (pkg/podnet) use iptables and ip.
unit: vet packages
	$(GO) test -count=1 ./...

packages:
	@$(HARNESS) packages

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/...
	@# A file the build leaves out (a _windows or _arm64 name suffix, a stray build tag) holds
	@# code, or tests, that never run here.
	@ignored="$$($(GO) list -tags e2e -f '{{.ImportPath}} {{.IgnoredGoFiles}}' ./... | grep -v ' \[\]$$')"; \
		test -z "$$ignored" || { echo "files the build ignores on this platform:"; echo "$$ignored"; exit 1; }

# One cluster per suite; the lifecycle suite checks the teardown of the first; the multinode
# suite runs two nodes (NODES=2) and checks that nothing of either is left; csi-sanity
# checks the project's hostpath CSI driver on this machine, without a cluster; the TLS suite
# runs last, on a cluster of its own.
e2e:
	$(GO) test -tags e2e -count=1 -p 1 -parallel 4 -timeout 60m -v $(E2E_FLAGS) ./test/e2e/
	$(GO) test -tags e2e -count=1 -p 1 -timeout 30m -v ./test/e2e/lifecycle/
	@if [ "$(PREBUILD_CONFORMANCE)" = 1 ]; then \
		log=$${TMPDIR:-/tmp}/nodeagent-build-conformance.log; \
		echo "building the conformance suite in the background (log: $$log)"; \
		( nice -n 19 $(HARNESS) build-smoke >$$log 2>&1 & echo $$! >$${log%.log}.pid ); \
	fi
	$(GO) test -tags e2e -count=1 -p 1 -timeout 30m -v ./test/e2e/multinode/
	$(GO) test -tags e2e -count=1 -timeout 20m -v ./test/e2e/csisanity/
	$(MAKE) kubeadm
	$(MAKE) e2e-tls

# kubeadm init, then kubeadm join of two more nodes (an operator's JoinConfiguration and
# kind's), each node with nodeagent installed from manifests/ as the kubelet's service, on
# nodes in namespaces of their own; its own cluster, checked to leave nothing behind.
kubeadm:
	$(GO) test -tags e2e -count=1 -p 1 -timeout 30m -v ./test/e2e/kubeadm/

# TLS bootstrap and certificate rotation on a cluster of its own (NODEAGENT_TLS_BOOTSTRAP,
# certificates issued for 2 minutes): about 2.5 minutes, most of it waiting for rotations.
e2e-tls:
	$(GO) test -tags e2e -count=1 -p 1 -timeout 30m -v ./test/e2e/tlsbootstrap/

# Never part of make test (its smoke is bench-smoke). BENCH_FLAGS e.g. "-n 50 -rounds 1 -hold 10s".
BENCH_FLAGS ?=
bench:
	$(GO) run ./test/cmd/bench $(BENCH_FLAGS)

# make test's smoke of the bench: one round of each side (nodeagent, the upstream kubelet, the
# floor) with 3 pods and 3-s holds on the bench's own harness cluster; any failed round fails
# it (-strict). Its figures mean nothing; its results go to a temporary directory.
bench-smoke:
	out=$$(mktemp -d) && $(GO) run ./test/cmd/bench -strict -n 3 -rounds 1 -hold 3s -out $$out && rm -rf $$out

# Each pod mounts a fresh 1Mi claim of the hostpath CSI driver (StorageClass nodeagent-csi);
# nodeagent and the kubelet only, no floor.
bench-pvc:
	$(GO) run ./test/cmd/bench -pvc $(BENCH_FLAGS)

# 1000 pods with volumes, probes and hooks created and deleted, 8 at a time, on the e2e
# suite's cluster; what the node holds before and after is compared (docs/soak.md). Never
# part of make test, whose e2e suite runs the same test with 24 pods. SOAK_CYCLES overrides.
SOAK_CYCLES ?= 1000
soak:
	SOAK_CYCLES=$(SOAK_CYCLES) $(GO) test -tags e2e -count=1 -p 1 -timeout 3h -v -run '^TestSoak$$' ./test/e2e/

# The hot paths alone (status computation, relist, container config), no cluster.
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

# The upstream conformance suite on its own harness cluster (brought up and torn down by the
# runner, after the e2e suite's is down). The full run is never part of make test; the smoke
# run (a few fast specs, exit non-zero on any failure) is its last step. Results under
# /var/lib/nodeagent-harness/conformance/<node>/. CONFORMANCE_NODE=kubelet runs the same
# against the upstream kubelet; FOCUS, SKIP (ginkgo regexps) and PROCS override the defaults.
export CONFORMANCE_NODE CONFORMANCE_SCOPE FOCUS SKIP PROCS
conformance:
	$(GO) run ./test/cmd/conformance

conformance-smoke:
	$(GO) run ./test/cmd/conformance -smoke
