# hetsync — build, test and demo. `make demo` and `make test` install what they need:
# Go modules through the module proxy, Debian packages (the Fashion-MNIST data set, an OpenSSH
# server for the SSH launcher's tests) through apt when running as root, with a clear message
# otherwise.
GO        ?= go
BIN       := bin/hetsync
TAGS      ?=
TESTFLAGS ?= -count=1 -timeout 900s
# Debian packages the tests need (sshd for the SSH launcher tests, ip for the netns test,
# Open MPI's mpirun for the test of a program started by mpirun).
TEST_SYSPKGS := openssh-server iproute2 openmpi-bin
DEMO_OUT  ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: all build deps data test-deps test vet fmt-check fuzz demo bench bench-compute clean \
        cuda cuda-fetch cuda-check cuda-test-gpu ptx python python-deps python-test

all: build

deps:
	@$(GO) mod download

data:
	@scripts/setup-data.sh

test-deps: deps data
	@scripts/setup-system.sh $(TEST_SYSPKGS)

build: deps
	$(GO) build -tags '$(TAGS)' -o $(BIN) ./cmd/hetsync

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet -tags '$(TAGS)' ./...

# Fuzz targets of the parsers and decoders that read what another process or a user wrote,
# each run briefly on top of its seed corpus (which `go test` also runs, as tests). A failing
# input is saved under the package's testdata/fuzz and fails the target. The budget is a count
# of inputs, not a duration: Go 1.26's fuzzing coordinator can fail a target with "context
# deadline exceeded" when a duration ends while a starved worker is mid-input (golang/go#75804),
# which a loaded CI machine hits; a count has no deadline to race.
FUZZTIME     ?= 20000x
FUZZ_TARGETS := ./transport:FuzzStreamRecv ./transport:FuzzDecodeHeader ./transport/p2p:FuzzRendezvousMessages \
                ./launcher:FuzzParseHostList ./launcher:FuzzParseHostfile ./experiment:FuzzParse \
                ./workload/data:FuzzDecodeIDX

fuzz: deps
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$pkg $$fn for $(FUZZTIME)"; \
	  $(GO) test -tags '$(TAGS)' -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

# The whole suite. RACE_DIRS run in full under the race detector; without it, only their tests
# that read raceEnabled (directly or through a helper: the allocation checks, and the tests that
# skip or shrink under -race), which scripts/race-divergent-tests.sh finds, so that a new test
# of either kind cannot fall out of both passes. Every other package runs once, without -race.
# The real data set is required (HETSYNC_REQUIRE_DATA=1): a missing one fails the data test
# instead of skipping it.
RACE_DIRS := transport collective topology bench
test: test-deps fmt-check vet fuzz
	HETSYNC_REQUIRE_DATA=1 $(GO) test -tags '$(TAGS)' $(TESTFLAGS) -race $(RACE_DIRS:%=./%/...)
	tests=$$(scripts/race-divergent-tests.sh $(RACE_DIRS)) && \
	  HETSYNC_REQUIRE_DATA=1 $(GO) test -tags '$(TAGS)' $(TESTFLAGS) -run "$$tests" $(RACE_DIRS:%=./%/...)
	HETSYNC_REQUIRE_DATA=1 $(GO) test -tags '$(TAGS)' $(TESTFLAGS) \
	  $$($(GO) list -tags '$(TAGS)' ./... | grep -Ev "^$$($(GO) list -m)/($$(echo $(RACE_DIRS) | tr ' ' '|'))(/|$$)")
	$(MAKE) python-test

# The main job: a short bandwidth table of the four aggregation algorithms, then ESync against
# SSGD and ASGD on Fashion-MNIST with slowdowns 1,1,2,4, and the report with its figures.
demo: build data
	$(BIN) bench -np 4 --collective all -b 4K -e 4M -f 8 -n 5 -w 1 -c 1
	$(BIN) experiment experiments/demo.yaml --out $(DEMO_OUT)
	@echo "report: $(DEMO_OUT)/report/report.md"

# Aggregation bandwidth of the four algorithms (nccl-tests format).
bench: build
	$(BIN) bench -np 4 --collective all -b 4K -e 64M -f 4 -n 10 -w 2 -c 1

bench-compute:
	scripts/bench-compute.sh

# CUDA backend (kernels/cuda, build tag cuda). cuda-env.sh fetches Debian's nvidia-cuda-dev and
# extracts only headers and link stubs into ~/.cache/hetsync/cuda; no CUDA toolkit is needed.
cuda-fetch:
	scripts/cuda-env.sh toolkit

cuda:
	scripts/cuda-env.sh run $(GO) build -tags cuda -o bin/hetsync-cuda ./cmd/hetsync

ptx:
	scripts/cuda-ptx.sh gen

cuda-check: cuda
	scripts/cuda-ptx.sh check
	scripts/cuda-env.sh run $(GO) vet -tags cuda ./kernels/cuda/
	scripts/cuda-env.sh run $(GO) test -c -tags cuda -o /dev/null ./kernels/cuda/
	$(GO) vet -tags cudaemu ./kernels/cuda/
	$(GO) test $(TESTFLAGS) -tags cudaemu ./kernels/cuda/

cuda-test-gpu:
	scripts/cuda-env.sh run $(GO) test -count=1 -timeout 600s -tags cuda -v ./kernels/cuda/

# The Python package (python/hetsync): the C ABI (capi/hetsync.h) built in place as the shared
# library that the package loads. Its tests run on Debian's interpreter, where python3-torch
# lives (a python3 earlier on PATH, a pyenv shim say, may lack it), and launch real ranks with
# bin/hetsync.
PY_LIB     := python/hetsync/_lib/libhetsync.so
PYTHON     ?= /usr/bin/python3
PY_SYSPKGS := python3-torch python3-numpy python3-pytest python3-torchvision

python: deps
	$(GO) build -buildmode=c-shared -o $(PY_LIB) ./capi

python-deps:
	@scripts/setup-system.sh $(PY_SYSPKGS)

python-test: python-deps python build
	PYTHONPATH=$(CURDIR)/python HETSYNC_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

clean:
	rm -rf bin $(PY_LIB) $(PY_LIB:.so=.h)
