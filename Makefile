# Makefile — the front door. `make run` runs the lessons, `make test` runs every test; both set everything up.
# One CMake build tree per flavor: build/cpu (CPU backend), build/cuda (nvcc), build/cpu-sanitize (ASan + UBSan).
# `make help` lists the targets.

SHELL := /bin/bash
export PATH := $(PATH):/usr/local/cuda/bin
JOBS ?= $(shell nproc)
GENERATOR := $(if $(shell command -v ninja),-G Ninja,)
# ($(shell) does not see the PATH exported above with GNU Make < 4.4, hence the explicit fallback.)
NVCC := $(or $(shell command -v nvcc),$(wildcard /usr/local/cuda/bin/nvcc))
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
RUN_FLAVOR := $(if $(and $(HAVE_GPU),$(NVCC)),cuda,cpu)
CTEST := ctest --output-on-failure -j $(JOBS)

.PHONY: help deps cpu cuda sanitize all test test-cpu test-cuda test-sanitize run bench data playground clean

help:
	@echo "make run            build, then run the lessons (cuda flavor when a GPU is present, else cpu)"
	@echo "make test           build both flavors and run the whole test suite in each"
	@echo "make test-sanitize  the cpu flavor with AddressSanitizer + UBSan, and its tests"
	@echo "make bench          kernel and backend benchmarks (figures printed, not asserted)"
	@echo "make data           download MNIST into data/mnist (MD5-checked)"
	@echo "make all            build both flavors"
	@echo "make cpu | cuda     build one flavor (build/cpu, build/cuda)"
	@echo "make playground     build the playground/*.cu executables in both flavors"
	@echo "make deps           install missing Debian/Ubuntu packages"
	@echo "make clean          remove build/"

deps:
	@bash tools/install_deps.sh

build/cpu/CMakeCache.txt: | deps
	cmake -S . -B build/cpu $(GENERATOR) -DFLAVOR=cpu
build/cpu-sanitize/CMakeCache.txt: | deps
	cmake -S . -B build/cpu-sanitize $(GENERATOR) -DFLAVOR=cpu -DSANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
build/cuda/CMakeCache.txt: | deps
	cmake -S . -B build/cuda $(GENERATOR) -DFLAVOR=cuda

cpu: build/cpu/CMakeCache.txt
	cmake --build build/cpu -j $(JOBS)
sanitize: build/cpu-sanitize/CMakeCache.txt
	cmake --build build/cpu-sanitize -j $(JOBS)
ifeq ($(NVCC),)
cuda:
	@echo "skipping the cuda flavor: nvcc not found (install the CUDA toolkit to build it)"
else
cuda: build/cuda/CMakeCache.txt
	cmake --build build/cuda -j $(JOBS)
endif
all: cpu cuda
playground: build/cpu/CMakeCache.txt $(if $(NVCC),build/cuda/CMakeCache.txt)
	cmake --build build/cpu -j $(JOBS) --target playground
	$(if $(NVCC),cmake --build build/cuda -j $(JOBS) --target playground)

test-cpu: cpu
	$(CTEST) --test-dir build/cpu
test-sanitize: sanitize
	$(CTEST) --test-dir build/cpu-sanitize
ifeq ($(NVCC),)
test-cuda: cuda
else
test-cuda: cuda
	@$(if $(HAVE_GPU),echo "cuda flavor: running on the GPU",echo "cuda flavor: no GPU here, so tests that need one are reported as skipped")
	$(CTEST) --test-dir build/cuda
endif
test: test-cpu test-cuda

run: $(RUN_FLAVOR)
	@echo "make run: using the $(RUN_FLAVOR) flavor ($(if $(HAVE_GPU),a GPU is present,no GPU found: the CPU backend runs the kernels))"
	@lessons=$$(ls build/$(RUN_FLAVOR)/lessons/lesson* 2>/dev/null | sort); \
	if [ -z "$$lessons" ]; then \
	  echo "no lessons are built yet; running the CPU reference trainer instead"; \
	  build/$(RUN_FLAVOR)/tools/reference $(ARGS); \
	else \
	  for lesson in $$lessons; do echo "=== $$lesson"; $$lesson $(ARGS) || exit $$?; done; \
	fi

bench: $(RUN_FLAVOR)
	build/$(RUN_FLAVOR)/bench/backend_bench
	build/$(RUN_FLAVOR)/bench/bench

data:
	bash data/download_mnist.sh

clean:
	rm -rf build
