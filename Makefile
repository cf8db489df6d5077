# hetsync — build, test and demo. `make demo` and `make test` install what they need.
GO       ?= go
BIN      := bin/hetsync
TAGS     ?=
SYSPKGS  ?=
TESTFLAGS ?= -count=1 -timeout 900s

.PHONY: all build deps test vet fmt-check demo bench peers clean

all: build

deps:
	@$(GO) mod download
	@[ -z "$(SYSPKGS)" ] || scripts/setup-system.sh $(SYSPKGS)

build: deps
	$(GO) build -tags '$(TAGS)' -o $(BIN) ./cmd/hetsync

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet -tags '$(TAGS)' ./...

test: deps fmt-check vet
	$(GO) test -tags '$(TAGS)' $(TESTFLAGS) -race ./transport/... ./collective/...
	$(GO) test -tags '$(TAGS)' $(TESTFLAGS) ./...

demo: build
	$(BIN) bench -np 4 --collective all -b 4K -e 16M -f 4 -n 10 -w 2 -c 1

clean:
	rm -rf bin
