# agentreplay build.
#   make          build ./agentreplay (and the CUDA kernels where nvcc exists)
#   make test     build and run every test; closing line "N passed, N failed"
#   make check    the same tests under AddressSanitizer + UBSan
#   make bench    benchmarks (speed, memory); not part of make test
#   make fuzz     libFuzzer harnesses, FUZZ_SECONDS each (clang)
#   make run      the main job: the built-in comparison, results/demo/
#   make deps     install the Debian packages this needs (idempotent)
#   make install  PREFIX=/usr/local
# Objects go to build/<variant>/, never beside the sources.

PREFIX   ?= /usr/local
CC       ?= cc
BUILD    ?= build/release
SHARED   ?= $(abspath $(CURDIR)/../shared)
FUZZ_SECONDS ?= 60

DEB_PKGS := pkg-config libcurl4-openssl-dev libev-dev libjansson-dev \
            libhttp-parser-dev gnuplot-nox clang valgrind

# -ffp-contract=off: no fused multiply-adds, so results do not depend on
# the compiler or the build (see DESIGN.md).
CFLAGS_BASE := -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter \
               -ffp-contract=off -I. -MMD -MP
OPT      ?= -O2 -g
PKG_CFLAGS = $(shell pkg-config --cflags libcurl jansson 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs libcurl jansson 2>/dev/null) -lev -lhttp_parser -lm -lpthread
CFLAGS   += $(CFLAGS_BASE) $(OPT) $(PKG_CFLAGS) -DAGENTREPLAY_DATADIR='"$(PREFIX)/share/agentreplay"'
LDLIBS   += $(PKG_LIBS)

# Library sources: every .c of the source folders except the fuzz harnesses
# and the programs in tests/.
SRC_DIRS := traces/base traces engine/clock engine engine/server plots kernels replay replay/cli
LIB_SRC  := $(filter-out replay/cli/main.c,$(sort $(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c))))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard tests/bench_*.c))
BENCH_BIN := $(BENCH_SRC:tests/%.c=$(BUILD)/tests/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz_*.c))

NVCC     := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

# MPI (README, "Running across machines"): where mpicc (Open MPI) exists,
# replay/dist.c is compiled with its flags and the programs link its
# libraries; elsewhere dist.c is a stub and a job of several ranks is
# refused. `make deps` installs Debian's Open MPI.
DEB_PKGS += openmpi-bin libopenmpi-dev
MPICC    := $(shell command -v mpicc 2>/dev/null)
# Open MPI calls libevent's event_add and others, which libev exports too
# (its libevent emulation): libevent_core is named first so that the
# dynamic linker binds them to libevent, not to libev.
ifneq ($(MPICC),)
$(BUILD)/replay/dist.o: CFLAGS += -DAGENTREPLAY_MPI $(shell $(MPICC) --showme:compile 2>/dev/null)
LDLIBS   := -Wl,--push-state,--no-as-needed $(shell pkg-config --libs libevent_core 2>/dev/null) \
            -Wl,--pop-state $(shell $(MPICC) --showme:link 2>/dev/null) $(LDLIBS)
endif

.PHONY: all test check bench fuzz run deps install clean kernels soak valgrind
all: deps-ok ./agentreplay $(if $(NVCC),kernels)

# Dependencies: checked cheaply on every build, installed only when missing.
# Every compile waits for the check (an order-only prerequisite of each
# object and program below), so `make -j run` on a fresh machine installs
# first and compiles after; the flags from pkg-config are read when each
# recipe runs, after the install.
.PHONY: deps-ok
deps-ok:
	@pkg-config --exists libcurl jansson 2>/dev/null && [ -f /usr/include/ev.h ] && \
	  [ -f /usr/include/http_parser.h ] && command -v gnuplot >/dev/null || \
	  $(MAKE) --no-print-directory deps

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
	    $$missing >/dev/null || exit 1; \
	else echo "deps: all present"; fi

$(BUILD)/%.o: %.c | deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libagentreplay.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/agentreplay: $(BUILD)/replay/cli/main.o $(BUILD)/libagentreplay.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

./agentreplay: $(BUILD)/agentreplay
	cp $< $@

$(BUILD)/tests/%: tests/%.c $(BUILD)/libagentreplay.a tests/testhelp.h | deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libagentreplay.a -o $@ $(LDFLAGS) $(LDLIBS)

# Tests run from the repository root with the shared folder named; each
# prints "N passed, N failed[, N skipped]"; tests/run.sh sums them.
test: deps-ok $(BUILD)/agentreplay $(TEST_BIN)
	@AGENTREPLAY_SHARED=$(SHARED) AGENTREPLAY_BIN=$(CURDIR)/$(BUILD)/agentreplay \
	  sh tests/run.sh tests/layers.sh $(TEST_BIN)

check: deps-ok
	@$(MAKE) --no-print-directory BUILD=build/check CC=$(CC) \
	  OPT="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	  LDFLAGS="-fsanitize=address,undefined" test

bench: deps-ok $(BUILD)/agentreplay $(BENCH_BIN)
	@for b in $(BENCH_BIN); do AGENTREPLAY_SHARED=$(SHARED) AGENTREPLAY_BIN=$(CURDIR)/$(BUILD)/agentreplay $$b || exit 1; done

# Fuzz harnesses: clang's libFuzzer, each for FUZZ_SECONDS.
FUZZ_BIN := $(FUZZ_SRC:tests/%.c=build/fuzz/%)
# The harnesses reach no kernel code (only the kernels command calls it),
# and kernels/ is built by gcc and nvcc only.
FUZZ_LIB_OBJ := $(patsubst %.c,build/fuzz/%.o,$(filter-out kernels/% replay/cli/kernels.c,$(LIB_SRC)))
build/fuzz/%.o: %.c | deps-ok
	@mkdir -p $(dir $@)
	clang $(CFLAGS_BASE) $(PKG_CFLAGS) -DAGENTREPLAY_DATADIR='"$(PREFIX)/share/agentreplay"' -O1 -g -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@
# Kept between runs (make would delete them as intermediates). Harnesses
# link an archive, so that each takes only the objects it reaches (the
# command registry, replay/cli/cli.c, names the kernels command, which the
# fuzz build leaves out; fuzz_flags.c stands in for it).
.SECONDARY: $(FUZZ_LIB_OBJ)
build/fuzz/libagentreplay.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
build/fuzz/fuzz_%: tests/fuzz_%.c build/fuzz/libagentreplay.a | deps-ok
	clang $(CFLAGS_BASE) $(PKG_CFLAGS) -O1 -g -fsanitize=fuzzer,address,undefined $< \
	  build/fuzz/libagentreplay.a -o $@ $(LDLIBS)
fuzz: deps-ok $(FUZZ_BIN)
	@SHARED=$(SHARED) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz.sh $(FUZZ_BIN)

# The main job; on a fresh machine it installs the dependencies first.
run: deps-ok ./agentreplay
	./agentreplay

# The 30-minute faults soak (tests/soak.sh; SOAK_SECONDS to change it) and
# the reduced main job under Valgrind (tests/valgrind.sh).
SOAK_SECONDS ?= 1800
soak: deps-ok $(BUILD)/agentreplay $(BUILD)/tests/test_reliability
	@SOAK_SECONDS=$(SOAK_SECONDS) sh tests/soak.sh $(BUILD)
valgrind: deps-ok $(BUILD)/agentreplay
	@sh tests/valgrind.sh $(BUILD)/agentreplay

install: ./agentreplay
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/agentreplay
	install -m 755 agentreplay $(DESTDIR)$(PREFIX)/bin/agentreplay
	for d in engine/presets plots traces/samples; do \
	  install -d $(DESTDIR)$(PREFIX)/share/agentreplay/$$d; \
	  cp -r $$d/. $(DESTDIR)$(PREFIX)/share/agentreplay/$$d/; done

# CUDA kernels: built only where nvcc exists (kernels/Makefile.cuda).
kernels:
	@if [ -n "$(NVCC)" ] && [ -f kernels/cuda.mk ]; then $(MAKE) --no-print-directory -f kernels/cuda.mk NVCC=$(NVCC); \
	 else echo "kernels: nvcc not found, CUDA kernels not built"; fi

clean:
	rm -rf build agentreplay

-include $(LIB_OBJ:.o=.d) $(BUILD)/replay/cli/main.d

# ---- conformance-plan: the replay plan against AIPerf 0.13.0's own -------
# (tests/conformance/README.md). Not part of `make test`. AIPERF_VENV is
# made on first use (pip install aiperf==0.13.0); TRACES is any folder of
# Weka traces. Also run: the hand-made cases and a synthesized folder.
AIPERF_VENV ?= build/aiperf
TRACES ?= $(SHARED)/traces/agentic-cc
.PHONY: conformance conformance-plan
conformance: conformance-plan
conformance-plan: ./agentreplay
	@AIPERF_VENV=$(AIPERF_VENV) sh tests/conformance/plan/run.sh ./agentreplay \
	  build/conformance/plan $(TRACES) tests/conformance/plan/cases synth:40:7

# ---- conformance-timing: the replayer's timing against AIPerf 0.13.0 ------
# (tests/conformance/timing/README.md, replay/CONFORMANCE.md). Real time:
# AIPerf's AgentX scenario and `agentreplay load`, each against its own
# `agentreplay serve`, then `sim`, at each of CONCS for DURATION seconds.
# Not part of `make test`.
CONCS ?= 1 8
DURATION ?= 120
RATIO ?= 0.5
.PHONY: conformance-timing
conformance: conformance-timing
conformance-timing: ./agentreplay
	@AIPERF_VENV=$(AIPERF_VENV) BIN=./agentreplay CONCS="$(CONCS)" DURATION=$(DURATION) RATIO=$(RATIO) \
	  sh tests/conformance/timing/run.sh $(TRACES) build/conformance/timing

# ---- conformance-peers: AIPerf, GuideLLM and vllm bench serve against serve ----
# (tests/conformance/peers/run.sh; figures in replay/CONFORMANCE.md, "Peers").
# The venvs are made on first use from PyPI (peers-venvs); point
# AIPERF_VENV, GUIDELLM_VENV, VLLM_VENV at existing ones to reuse them.
# Not part of `make test`; about 5 minutes.
GUIDELLM_VENV ?= build/guidellm
VLLM_VENV ?= build/vllm
PEERS_N1 ?= 16
PEERS_N2 ?= 96
PEERS_ENV = AIPERF_VENV=$(AIPERF_VENV) GUIDELLM_VENV=$(GUIDELLM_VENV) VLLM_VENV=$(VLLM_VENV)
.PHONY: conformance conformance-peers peers-venvs
conformance: conformance-peers
peers-venvs:
	@$(PEERS_ENV) sh tests/conformance/peers/venvs.sh
conformance-peers: ./agentreplay peers-venvs
	@$(PEERS_ENV) N1=$(PEERS_N1) N2=$(PEERS_N2) sh tests/conformance/peers/run.sh ./agentreplay build/conformance/peers
