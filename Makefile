# weightport: `make demo` and `make test` work on a fresh machine (they run scripts/setup first).
BUILD        ?= build
ASAN_BUILD   ?= build-asan
TSAN_BUILD   ?= build-tsan
JOBS         ?= 2
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 2
PYTHON       ?= python3
CMAKE_FLAGS  ?=
# The sanitizer trees: clang (its -Wthread-safety checks the locking annotations), -O1 as the
# sanitizers advise, and line tables only (stack traces name file and line; full debug info would
# double the compile). No benchmarks or Python module: no test there needs them.
SAN_CMAKE = -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DWEIGHTPORT_CUDA=OFF -DWEIGHTPORT_BENCH=OFF -DWEIGHTPORT_PYTHON=OFF
# The folders of src/ whose code runs threads: their tests run under ThreadSanitizer.
TSAN_TEST_LAYERS = core;format;transport;control;store;engine;cli

.PHONY: all setup build test-build demo test check test-python wheel test-package vllm-env test-vllm sglang-env test-sglang rl-env test-rl asan-build test-asan tsan-build test-tsan fuzz format clean

all: build

setup:
	bash scripts/setup

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j$(JOBS) --target all benchmarks

# What the tests run: everything but the benchmarks (no test runs one; they compile in 1.5 minutes).
test-build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j$(JOBS)

# Only what the demo runs: the weightport command and the libraries it links.
demo: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j$(JOBS) --target weightport_cli
	./$(BUILD)/weightport demo

# Every test: unit tests, Python cross-checks, the installed package, the vLLM backend, the verl
# backend under Ray, the sanitizer builds and each fuzzer for FUZZ_SECONDS. scripts/test-stages times each stage and prints
# the table at the end ($(BUILD)/test-times.tsv keeps it). A stage written @T runs in the background
# at the idle CPU priority until a later stage named T waits for it: vLLM's and verl's environments
# (mostly downloads and unpacking) install during the main build. Tests run with nothing beside them: on
# this 2-core machine a compile beside them, even at idle priority, made the unit and Python tests
# take twice as long, and a testbed test missed its deadline.
TEST_STAGES ?= setup @vllm-env @sglang-env @rl-env test-build wheel vllm-env sglang-env rl-env check test-python \
  test-package test-vllm test-sglang test-rl tsan-build test-tsan asan-build test-asan fuzz
test:
	bash scripts/test-stages --times $(BUILD)/test-times.tsv --logs $(BUILD)/test-logs $(TEST_STAGES)

check:
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# On JOBS workers (pytest-xdist): the testbed's tests share its namespaces, so one worker runs them
# all (conftest.py groups them); tests marked serial read the whole machine's shared memory, so
# they run afterwards, alone.
test-python:
	WEIGHTPORT_BIN=$(CURDIR)/$(BUILD)/weightport $(PYTHON) -m pytest -q -n $(JOBS) -m "not serial" tests/python
	WEIGHTPORT_BIN=$(CURDIR)/$(BUILD)/weightport $(PYTHON) -m pytest -q -m serial tests/python

# The Python package, built once (pip wheel ./python, as `pip install ./python` builds it) and
# installed from that wheel by test-package and test-vllm.
WHEEL_DIR ?= $(BUILD)/wheel
wheel:
	rm -rf $(WHEEL_DIR)
	$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w $(WHEEL_DIR) ./python

# The wheel installed into a fresh virtual environment (torch and numpy from the system's), then
# the package's API tests against the installed package, not the build tree's.
PKG_VENV ?= $(BUILD)/package-venv
test-package:
	rm -rf $(PKG_VENV)
	$(PYTHON) -m venv --system-site-packages $(PKG_VENV)
	$(PKG_VENV)/bin/pip install -q --disable-pip-version-check --no-deps $(WHEEL_DIR)/weightport-*.whl
	cd $(PKG_VENV) && ./bin/python -c "import weightport, sys; assert '$(PKG_VENV)' in weightport.__file__, weightport.__file__"
	WEIGHTPORT_BIN=$(CURDIR)/$(BUILD)/weightport $(PKG_VENV)/bin/python -m pytest -q tests/python/test_package_api.py

# The vLLM weight-transfer backend against a real vLLM (the CPU build) in its own environment,
# .deps/vllm (scripts/setup --vllm installs it, and here weightport's package from the wheel).
VLLM_PYTHON ?= .deps/vllm/bin/python
vllm-env:
	bash scripts/setup --vllm --no-package

test-vllm:
	bash scripts/setup --vllm --package "$$(ls $(WHEEL_DIR)/weightport-*.whl)"
	$(VLLM_PYTHON) -m pytest -q -p no:cacheprovider -n $(JOBS) tests/vllm

# weightport as SGLang's weight-update path against a real SGLang server (its CPU path) in its own
# environment, .deps/sglang (scripts/setup --sglang, and here weightport's package from the wheel).
SGLANG_PYTHON ?= .deps/sglang/bin/python
sglang-env:
	bash scripts/setup --sglang --no-package

test-sglang:
	bash scripts/setup --sglang --package "$$(ls $(WHEEL_DIR)/weightport-*.whl)"
	$(SGLANG_PYTHON) -m pytest -q -p no:cacheprovider -n $(JOBS) tests/sglang

# The verl checkpoint engine under Ray (verl's registry, manager and CheckpointEngineWorker; one
# test spans three testbed hosts, as root) in its own environment, .deps/rl (scripts/setup --rl).
RL_PYTHON ?= .deps/rl/bin/python
rl-env:
	bash scripts/setup --rl --no-package

test-rl:
	bash scripts/setup --rl --package "$$(ls $(WHEEL_DIR)/weightport-*.whl)"
	$(RL_PYTHON) -m pytest -q -p no:cacheprovider -n $(JOBS) tests/rl

# One clang tree for AddressSanitizer + UndefinedBehaviorSanitizer and the fuzzers: the library
# carries libFuzzer's coverage hooks, the unit tests run there, and so do the fuzz targets.
asan-build:
	cmake -S . -B $(ASAN_BUILD) $(SAN_CMAKE) -DWEIGHTPORT_SANITIZE=address,undefined -DWEIGHTPORT_FUZZ=ON \
	  -DWEIGHTPORT_CLI_FLAGS=-O0
	cmake --build $(ASAN_BUILD) -j$(JOBS)

test-asan: asan-build
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS)

fuzz: asan-build
	bash scripts/run-fuzzers $(ASAN_BUILD) $(FUZZ_SECONDS) $(FUZZ_JOBS)

# ThreadSanitizer over the tests of the folders whose code runs threads (TSAN_TEST_LAYERS), the
# command's included (its tests run it; at -O0, like the ASan tree's). UCX's memory hooks
# (libucm) patch madvise and crash under TSan, so they are off; tsan.supp says which races are
# one-sided transfers by design.
tsan-build:
	cmake -S . -B $(TSAN_BUILD) $(SAN_CMAKE) -DWEIGHTPORT_SANITIZE=thread -DWEIGHTPORT_CLI_FLAGS=-O0 \
	  "-DWEIGHTPORT_TEST_LAYERS=$(TSAN_TEST_LAYERS)"
	cmake --build $(TSAN_BUILD) -j$(JOBS)

test-tsan: tsan-build
	UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no \
	  TSAN_OPTIONS="halt_on_error=1 history_size=7 suppressions=$(CURDIR)/tsan.supp" \
	  ctest --test-dir $(TSAN_BUILD) --output-on-failure -j$(JOBS)

format:
	git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
