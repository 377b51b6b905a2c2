# weightport: `make demo` and `make test` work on a fresh machine (they run scripts/setup first).
BUILD        ?= build
ASAN_BUILD   ?= build-asan
TSAN_BUILD   ?= build-tsan
FUZZ_BUILD   ?= build-fuzz
JOBS         ?= 2
FUZZ_SECONDS ?= 60
PYTHON       ?= python3
CMAKE_FLAGS  ?=

.PHONY: all setup build demo test check test-python test-package test-vllm test-asan test-tsan fuzz format clean

all: build

setup:
	bash scripts/setup

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j$(JOBS)

# Only what the demo runs: the weightport command and the libraries it links.
demo: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j$(JOBS) --target weightport_cli
	./$(BUILD)/weightport demo

# Every test: unit tests, Python cross-checks, the sanitizer build, and each fuzzer for FUZZ_SECONDS.
test: build
	$(MAKE) --no-print-directory check test-python test-package test-vllm test-asan test-tsan fuzz

check:
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

test-python:
	WEIGHTPORT_BIN=$(CURDIR)/$(BUILD)/weightport $(PYTHON) -m pytest -q tests/python

# pip install ./python into a fresh virtual environment (torch and numpy from the system's), then the
# package's API tests against the installed package, not the build tree's.
PKG_VENV ?= $(BUILD)/package-venv
test-package:
	rm -rf $(PKG_VENV)
	$(PYTHON) -m venv --system-site-packages $(PKG_VENV)
	$(PKG_VENV)/bin/pip install -q --disable-pip-version-check ./python
	cd $(PKG_VENV) && ./bin/python -c "import weightport, sys; assert '$(PKG_VENV)' in weightport.__file__, weightport.__file__"
	WEIGHTPORT_BIN=$(CURDIR)/$(BUILD)/weightport $(PKG_VENV)/bin/python -m pytest -q tests/python/test_package_api.py

# The vLLM weight-transfer backend against a real vLLM (the CPU build) in its own environment,
# .deps/vllm (scripts/setup --vllm installs it and weightport's package into it).
VLLM_PYTHON ?= .deps/vllm/bin/python
test-vllm:
	bash scripts/setup --vllm
	$(VLLM_PYTHON) -m pytest -q -p no:cacheprovider tests/vllm

test-asan:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIGHTPORT_CUDA=OFF \
	  -DWEIGHTPORT_SANITIZE=address,undefined -DWEIGHTPORT_BENCH=OFF -DWEIGHTPORT_PYTHON=OFF
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS)

# ThreadSanitizer over every unit and engine test. UCX's memory hooks (libucm) patch madvise and
# crash under TSan, so they are off; tsan.supp says which races are one-sided transfers by design.
test-tsan:
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIGHTPORT_CUDA=OFF \
	  -DWEIGHTPORT_SANITIZE=thread -DWEIGHTPORT_BENCH=OFF -DWEIGHTPORT_PYTHON=OFF
	cmake --build $(TSAN_BUILD) -j$(JOBS)
	UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no \
	  TSAN_OPTIONS="halt_on_error=1 history_size=7 suppressions=$(CURDIR)/tsan.supp" \
	  ctest --test-dir $(TSAN_BUILD) --output-on-failure -j$(JOBS)

fuzz:
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIGHTPORT_CUDA=OFF \
	  -DWEIGHTPORT_TESTS=OFF -DWEIGHTPORT_BENCH=OFF -DWEIGHTPORT_PYTHON=OFF -DWEIGHTPORT_FUZZ=ON -DWEIGHTPORT_SANITIZE=address,undefined \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
	cmake --build $(FUZZ_BUILD) -j$(JOBS)
	bash scripts/run-fuzzers $(FUZZ_BUILD) $(FUZZ_SECONDS)

format:
	git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
