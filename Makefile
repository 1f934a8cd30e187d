# strata: thin wrapper over CMake. Every target first installs what is missing.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps deps-bench configure build test test-long fuzz asan tsan demo bench gpu-bundle gpu-check ucx-cuda format clean

deps:
	@bash deploy/install-deps.sh

deps-bench:
	@bash deploy/install-deps.sh --bench

# Ninja where it is installed (make deps installs it), for a new build folder
# only: a folder keeps the generator it was made with.
GENERATOR := $(shell [ ! -f $(BUILD)/CMakeCache.txt ] && command -v ninja >/dev/null && echo -G Ninja)

configure: deps
	@cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# ctest with the given selection, then the skipped tests with their reasons
# (from the run's JUnit file): a skip is never silent. $(1): ctest options,
# $(2): the JUnit file's name in $(BUILD).
ctest_with_skips = cd $(BUILD) && { ctest --output-on-failure $(1) --output-junit $(2); \
  rc=$$?; python3 $(CURDIR)/tests/report_skips.py $(2); exit $$rc; }

# The suite (everything not labelled "long").
test: build
	@$(call ctest_with_skips,-j $(JOBS) -LE long,ctest-junit.xml)

# Long cluster and soak tests (label "long"; none is also a pass).
test-long: build
	@$(call ctest_with_skips,-L long,ctest-long-junit.xml)

# Every fuzz target for a bounded time each (FUZZ_SECONDS), in build-fuzz/.
FUZZ_SECONDS ?= 20
fuzz: deps
	@bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/),
# and the actor, transport and serving tests under ThreadSanitizer (build-tsan/).
asan: deps
	@bash tests/sanitize/run.sh asan build-asan

tsan: deps
	@bash tests/sanitize/run.sh tsan build-tsan

# The main job: a one-node cluster (2 shards, 2 cache tiers, 2 workers)
# trained on generated data in ./data/, then a report (docs/manifest.md).
demo: build
	@./$(BUILD)/strata launch deploy/examples/local.yaml

# Tables on stdout (tiers, e2e, transport, serve); JSON lines and a plot in $(BUILD)/bench-results.{jsonl,png}.
bench: deps-bench build
	@rm -f $(BUILD)/bench-results.jsonl
	@./$(BUILD)/strata bench tiers --json-out $(BUILD)/bench-results.jsonl
	@./$(BUILD)/strata bench e2e --json-out $(BUILD)/bench-results.jsonl
	@./$(BUILD)/strata bench transport --json-out $(BUILD)/bench-results.jsonl
	@./$(BUILD)/strata bench serve --json-out $(BUILD)/bench-results.jsonl
	@bash bench/plot.sh $(BUILD)/bench-results.jsonl $(BUILD)/bench-results.png

# GPU: stripped test/bench binaries and their libraries in $(BUILD)/carry, for
# a device machine without Debian packages; then the check (skips here).
gpu-bundle: build
	@bash gpu/bundle.sh $(BUILD)

gpu-check: gpu-bundle
	@bash gpu/check.sh $(BUILD)/carry

# UCX with its CUDA transports, built from Debian's source package into
# $(BUILD)/ucx-cuda (never over Debian's UCX): deploy/build-ucx-cuda.sh.
# Fetches Debian packages; about 10 minutes on 2 cores. Not part of test.
ucx-cuda:
	@bash deploy/build-ucx-cuda.sh $(BUILD)

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')

clean:
	@rm -rf $(BUILD)
