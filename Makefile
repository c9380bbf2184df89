# sandtrap — build, test and benchmark everything.
GO      ?= go
PYTHON  ?= python3
BUILD   := build
LIB     := $(BUILD)/libsandtrap.so
GOFILES := $(shell find core capi -name '*.go' -o -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.map') go.mod go.sum
LDFLAGS := -s -w -extldflags '-Wl,--version-script=$(CURDIR)/capi/sandtrap.map'
CFLAGS_HDR := -std=c99 -pedantic -Wall -Wextra -Werror

INIT    := core/spawn/sandtrap-init
INIT_CFLAGS := -Os -static -nostdlib -fno-stack-protector -fno-asynchronous-unwind-tables \
	-fno-pie -no-pie -Wall -Wextra -Werror -s

.PHONY: all lib init test test-go test-c test-guest test-python test-node fuzz bench deps demo clean

all: lib

lib: $(LIB)

# pid 1 of every sandbox: freestanding, embedded into the library (go:embed)
init: $(INIT)
$(INIT): core/spawn/init/init.c core/spawn/wire.h
	$(CC) $(INIT_CFLAGS) -o $@ $<

$(LIB): $(GOFILES) include/sandtrap.h $(INIT)
	@mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -trimpath -buildmode=c-shared -ldflags "$(LDFLAGS)" -o $(LIB) ./capi
	@rm -f $(BUILD)/libsandtrap.h   # the hand-written include/sandtrap.h is the contract

# Everything a fresh machine needs (Debian packages, Go modules).
deps:
	bash scripts/deps.sh

# The whole suite; installs what it needs first (README's test command).
test: deps
	$(MAKE) lib
	$(MAKE) test-go test-c fuzz test-guest test-python test-node

test-go: $(INIT)
	$(GO) test -count=1 ./core/...
	bash tests/unprivileged.sh

test-c: lib
	bash tests/c/run.sh

fuzz: $(INIT)
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 150000x ./core/engine
	$(GO) test -run '^$$' -fuzz FuzzPolicy -fuzztime 150000x ./core/policy

# the cooperative Python sandbox's guest runtime (pure Python)
test-guest:
	$(PYTHON) -m pip install -q pytest
	cd core/guest/python && $(PYTHON) -m pytest -q tests

test-python: lib
	$(PYTHON) -m pip install -q ./bindings/python pytest pytest-asyncio
	$(PYTHON) -m pytest -q bindings/python/tests

test-node: lib
	cd bindings/node && npm install --no-audit --no-fund && npm test

bench: deps lib
	$(GO) run ./bench/spawn
	$(PYTHON) -m pip install -q ./bindings/python
	$(PYTHON) bench/python/bench_run.py
	$(PYTHON) bench/python/bench_coop.py
	$(PYTHON) bench/python/bench_ticks.py
	$(PYTHON) bench/python/bench_fork.py
	cd bindings/node && npm install --no-audit --no-fund
	node bench/node/bench_run.mjs

# Builds everything and runs the demo (README's first command).
demo: deps
	$(MAKE) lib
	$(GO) run ./cmd/demo

clean:
	rm -rf $(BUILD) $(INIT)
