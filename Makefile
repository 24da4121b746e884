# Makefile — the front door. `make run` runs the lessons, `make test` runs every test; both set everything up.
# One CMake build tree per flavor: build/cpu (CPU backend), build/cuda (nvcc), build/cpu-sanitize (ASan + UBSan),
# build/cpu-race (ThreadSanitizer), build/cpu-counters (every memory access counted: sectors, bank conflicts).
# `make help` lists the targets.

SHELL := /bin/bash
export PATH := $(PATH):/usr/local/cuda/bin
JOBS ?= $(shell nproc)
# Extra options for configuring the cpu and cuda trees (CI: CMAKE_ARGS=-DWERROR=ON, warnings are errors).
CMAKE_ARGS ?=
GENERATOR := $(if $(shell command -v ninja),-G Ninja,)
# ($(shell) does not see the PATH exported above with GNU Make < 4.4, hence the explicit fallback.)
NVCC := $(or $(shell command -v nvcc),$(wildcard /usr/local/cuda/bin/nvcc))
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
RUN_FLAVOR := $(if $(and $(HAVE_GPU),$(NVCC)),cuda,cpu)
# tools/ctest_checked.sh: a test reported as skipped fails the run unless tests/allowed_skips.txt allows it.
CTEST := tools/ctest_checked.sh ctest --output-on-failure -j $(JOBS)

.PHONY: help deps cpu cuda sanitize race counters all test test-cpu test-cuda test-sanitize test-race test-counters test-fuzz \
	run report lesson diff \
	bench mutants data \
	playground check-playground clean

help:
	@echo "The course"
	@echo "  make run            build, then run the lessons in order and compare them in one table (cuda flavor when"
	@echo "                      a GPU and nvcc are present, else cpu); ARGS=\"--epochs 1 ...\" are passed to each lesson"
	@echo "  make lesson N=02    build, then run one lesson (ARGS=\"...\" are passed to it); N=09 runs under mpirun -n RANKS"
	@echo "                      (default 2)"
	@echo "  make diff A=01 B=02 what changed from one lesson's main.cu to another's (diff -u)"
	@echo "  make report         charts and report/README.md (matplotlib) from make run's results, running only missing or"
	@echo "                      stale lessons (FRESH=1: all; REPORT_BUILD=build/DIR: another tree)"
	@echo "  make data           download MNIST into data/mnist (MD5-checked)"
	@echo "Checks"
	@echo "  make test           test-cpu and test-cuda: both flavors built, the whole test suite run in each"
	@echo "  make test-cpu       build the cpu flavor and run its tests (a skip not allowed in tests/allowed_skips.txt fails)"
	@echo "  make test-cuda      build the cuda flavor and run its tests (no GPU: those that need one skip; no nvcc: skipped)"
	@echo "  make test-sanitize  the cpu flavor with AddressSanitizer + UBSan (build/cpu-sanitize), and its tests but"
	@echo "                      the float64-reference comparisons, lesson 06's 20-step runs and lesson 04's every-step run"
	@echo "  make test-race      the cpu flavor with ThreadSanitizer, the race detector (build/cpu-race), and its tests"
	@echo "                      except whole training runs and the async must-fail ones (RACE_TESTS=<regex>: some)"
	@echo "  make test-fuzz      the cpu flavor's tests but whole training runs, schedule-fuzzed with FUZZ_SEEDS (1 2 3)"
	@echo "  make test-counters  the counting build's tests: hand-derived sectors and bank conflicts, each GEMM step's counts"
	@echo "  make check-playground NAME=my_kernel   build and run playground/my_kernel.cu under ASan+UBSan and under"
	@echo "                      ThreadSanitizer (only it and the backend), a verdict per tree (FILE=path, ARGS=...)"
	@echo "  make mutants        plant each bug of tools/mutants.py's catalogue and check a test catches it (slow; NAMES=...)"
	@echo "  make bench          build make run's flavor, then run backend_bench and bench (figures printed, not asserted)"
	@echo "Maintainers"
	@echo "  make deps           install missing Debian/Ubuntu packages (tools/install_deps.sh; run before configuring a tree)"
	@echo "  make all            build both flavors"
	@echo "  make cpu | cuda     build one flavor (build/cpu, build/cuda; cuda is skipped with a line without nvcc)"
	@echo "  make sanitize       build the ASan + UBSan tree (build/cpu-sanitize)"
	@echo "  make race           build the ThreadSanitizer tree's unit tests (build/cpu-race)"
	@echo "  make counters       the counting build (build/cpu-counters): every global and shared access of every kernel"
	@echo "                      counted per warp instruction; builds its tests, bench and the lessons (no GPU needed)"
	@echo "  make playground     build the playground/*.cu executables in build/cpu, build/cuda (with nvcc)"
	@echo "                      and build/cpu-sanitize (if made)"
	@echo "  make clean          remove build/"
	@echo "  make help           this list (also plain make)"
	@echo "Also: JOBS=N (parallel jobs); CMAKE_ARGS=... (options when configuring the cpu, cuda and counting trees)."

deps:
	@bash tools/install_deps.sh

build/cpu/CMakeCache.txt: | deps
	cmake -S . -B build/cpu $(GENERATOR) -DFLAVOR=cpu $(CMAKE_ARGS)
build/cpu-sanitize/CMakeCache.txt: | deps
	cmake -S . -B build/cpu-sanitize $(GENERATOR) -DFLAVOR=cpu -DSANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
build/cpu-race/CMakeCache.txt: | deps
	cmake -S . -B build/cpu-race $(GENERATOR) -DFLAVOR=cpu -DRACECHECK=ON -DCMAKE_BUILD_TYPE=Debug
build/cpu-counters/CMakeCache.txt: | deps
	cmake -S . -B build/cpu-counters $(GENERATOR) -DFLAVOR=cpu -DCOUNTERS=ON $(CMAKE_ARGS)
build/cuda/CMakeCache.txt: | deps
	cmake -S . -B build/cuda $(GENERATOR) -DFLAVOR=cuda $(CMAKE_ARGS)

cpu: build/cpu/CMakeCache.txt
	cmake --build build/cpu -j $(JOBS)
sanitize: build/cpu-sanitize/CMakeCache.txt
	cmake --build build/cpu-sanitize -j $(JOBS)
race: build/cpu-race/CMakeCache.txt
	cmake --build build/cpu-race -j $(JOBS) --target unit_tests
# The counting build's bench and lesson 04 print memory requests instead of CPU times; every program there prints a
# per-kernel summary as it exits (CUDA_CPU_COUNTERS=summary|per-launch|off; common/cpu_backend/README.md).
counters: build/cpu-counters/CMakeCache.txt
	cmake --build build/cpu-counters -j $(JOBS) --target counting_tests bench lessons
	@echo "counting build ready: build/cpu-counters/bench/bench --quick prints every kernel's counts;"
	@echo "  build/cpu-counters/lessons/lesson04_fast_kernels --limit 256 --hidden 256 --epochs 1: the staircase as counts"
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
	$(if $(wildcard build/cpu-sanitize/CMakeCache.txt),cmake --build build/cpu-sanitize -j $(JOBS) --target playground)

# One playground file under both sanitizers: builds only its target in build/cpu-sanitize and build/cpu-race
# (configuring them if needed), runs it in each, prints one verdict per tree; non-zero if either found something.
# $(call shell_quote,TEXT): TEXT as one single-quoted shell word.
shell_quote = '$(subst ','\'',$(1))'
check-playground: | deps
	@JOBS=$(JOBS) bash tools/check_playground.sh $(call shell_quote,$(or $(FILE),$(NAME))) $(ARGS)

test-cpu: cpu
	$(CTEST) --test-dir build/cpu
# Left out, as numerics rather than memory safety (the cpu and cuda runs check them; their code paths run under the
# sanitizers in other tests): the step-by-step comparisons with the float64 reference (~7 minutes), lesson 06's 20-step
# runs under every policy (~2.4 minutes; "checkpointing: ... gradients are bitwise ..." runs the same code) and lesson 04
# with all seven GEMM steps (2 minutes; each step's kernels have their own tests, lesson 04 runs in two other tests).
# It builds only what those tests run: unit_tests, which brings the lessons and the reference trainer (the
# benchmarks have no test in this tree; `make sanitize` builds everything).
test-sanitize: build/cpu-sanitize/CMakeCache.txt
	cmake --build build/cpu-sanitize -j $(JOBS) --target unit_tests
	$(CTEST) --test-dir build/cpu-sanitize -E 'follow the float64 reference trainer|^checkpointing: 20 |^lessons: 04 with every GEMM step'
# Every test but the lessons' and lesson 06's 20-step runs (whole training runs, far too slow under ThreadSanitizer:
# their kernels are each tested on their own here) and the asynchronous
# streams' must-fail tests (a missing stream wait is meant to give stale data there; TSan reports it as a race
# first and stops). RACE_TESTS=<regex> picks some (CI runs a subset).
RACE_TESTS ?= .
test-race: race
	$(CTEST) --test-dir build/cpu-race -R '$(RACE_TESTS)' -E '^lessons: |^checkpointing: 20 |^must fail( \(late schedule\))?: a (pinned download|kernel on another stream|staging buffer)'
# The counting build's tests (their names start with "counting"): the counting rules and each kernel's counts.
test-counters: build/cpu-counters/CMakeCache.txt
	cmake --build build/cpu-counters -j $(JOBS) --target counting_tests
	$(CTEST) --test-dir build/cpu-counters -R '^counting'
# The cpu flavor's tests but whole training runs, once per seed with the thread and block order shuffled
# (CUDA_CPU_FUZZ): a missing __syncthreads, or an order a kernel silently relies on, gives wrong results for some seed.
FUZZ_SEEDS ?= 1 2 3
test-fuzz: cpu
	@for seed in $(FUZZ_SEEDS); do \
	    echo "== CUDA_CPU_FUZZ=$$seed"; \
	    CUDA_CPU_FUZZ=$$seed $(CTEST) --test-dir build/cpu -E '^lessons: |^checkpointing: 20 |^lesson_results_pinned' \
	        || exit 1; \
	done
ifeq ($(NVCC),)
test-cuda: cuda
else
test-cuda: cuda
	@$(if $(HAVE_GPU),echo "cuda flavor: running on the GPU",echo "cuda flavor: no GPU here, so tests that need one are reported as skipped")
	$(if $(HAVE_GPU),,ALLOW_ALL_SKIPS=1 )$(CTEST) --test-dir build/cuda
endif
test: test-cpu test-cuda

# The lessons are the source folders lessons/NN_name/main.cu (built as build/<flavor>/lessons/lessonNN_name), so an
# executable left behind by a renamed or deleted lesson is not run.
LESSON_NAMES = $(sort $(patsubst lessons/%/main.cu,%,$(wildcard lessons/*/main.cu)))
ifeq ($(RUN_FLAVOR),cuda)
RUN_WHERE := on the GPU
else
CPU_BECAUSE := $(if $(HAVE_GPU),$(if $(NVCC),the cpu flavor was asked for,nvcc not found),no GPU found)
RUN_WHERE := on the CPU backend ($(CPU_BECAUSE)), so times are CPU timings
endif

# $(call find_lesson,VAR,PREFIX,NAME): shell code that sets VAR to the one lesson folder whose name starts with
# PREFIX (a single digit is taken as 0N), or stops with the list of lessons; NAME is the make variable, for the message.
find_lesson = n='$(2)'; [[ $$n =~ ^[0-9]$$ ]] && n=0$$n; matches=(); \
	if [ -n "$$n" ]; then \
	  for d in lessons/"$$n"*/main.cu; do [ -f "$$d" ] && matches+=("$$(basename "$$(dirname "$$d")")"); done; \
	fi; \
	if [ $${\#matches[@]} -ne 1 ]; then \
	  if [ -z "$$n" ]; then echo "say which lesson: $(3)=NN (e.g. $(3)=01)" >&2; \
	  elif [ $${\#matches[@]} -eq 0 ]; then echo "no lesson folder starts with '$$n' ($(3)=$(2))" >&2; \
	  else echo "$(3)=$(2) matches several lessons: $${matches[*]}" >&2; fi; \
	  echo "available lessons: $(or $(LESSON_NAMES),none yet (lessons/NN_name/main.cu))" >&2; exit 2; \
	fi; $(1)=$${matches[0]}

# Only what the lessons need (the lessons target: every lesson and the reference trainer), not tests or benchmarks.
run: build/$(RUN_FLAVOR)/CMakeCache.txt
	cmake --build build/$(RUN_FLAVOR) -j $(JOBS) --target lessons
ifeq ($(LESSON_NAMES),)
	@echo "make run: no lesson is written yet (lessons/NN_name/main.cu), so running the CPU reference trainer" \
	  "instead (plain C++, float64: no kernel, no GPU)"
	build/$(RUN_FLAVOR)/tools/reference $(ARGS)
else
	@echo "make run: $(words $(LESSON_NAMES)) lesson$(if $(word 2,$(LESSON_NAMES)),s), $(RUN_FLAVOR) flavor, $(RUN_WHERE)"
	@bash tools/run_lessons.sh --build build/$(RUN_FLAVOR) --results build/$(RUN_FLAVOR)/results -- $(ARGS)
	@echo; echo "=== the lessons compared (reports in build/$(RUN_FLAVOR)/results/)"; reports=(); \
	for name in $(LESSON_NAMES); do report=build/$(RUN_FLAVOR)/results/lesson$$name.json; \
	  [[ $$name == 09* && ! -f $$report ]] || reports+=("$$report"); done; \
	python3 tools/compare_lessons.py "$${reports[@]}"
endif

# `make report`: the charts (tools/report.py) and report/README.md (device, flavor, commit, date, commands) from the
# lessons' JSON in <build>/results/, where `make run` leaves it: a lesson whose result matches this commit, these
# ARGS and its executable is not run again (FRESH=1 runs every lesson again); each chart is drawn as soon as its data
# exists. REPORT_BUILD picks another configured build tree (e.g. REPORT_BUILD=build/my-cpu); by default make run's.
# matplotlib is Debian's python3-matplotlib (make deps), which is /usr/bin/python3's: the python3 first on PATH (a
# pyenv or a venv) may not have it, so the first of the two that imports it draws.
REPORT_BUILD ?= build/$(RUN_FLAVOR)
report: deps $(filter build/cpu/CMakeCache.txt build/cuda/CMakeCache.txt,$(REPORT_BUILD)/CMakeCache.txt)
	@[ -f $(REPORT_BUILD)/CMakeCache.txt ] || { echo "make report: $(REPORT_BUILD) is not a configured build tree" \
	  "(cmake -S . -B $(REPORT_BUILD) -DFLAVOR=cpu, or leave REPORT_BUILD unset)" >&2; exit 2; }
ifeq ($(LESSON_NAMES),)
	@echo "make report: no lesson is written yet (lessons/NN_name/main.cu)" >&2; exit 2
else
	cmake --build $(REPORT_BUILD) -j $(JOBS) --target lessons
	@flavor=$$(sed -n 's/^FLAVOR:[A-Z]*=//p' $(REPORT_BUILD)/CMakeCache.txt); \
	echo "make report: $(words $(LESSON_NAMES)) lessons from $(REPORT_BUILD) ($$flavor flavor), charts into report/"
	@echo "make report: each GEMM step's memory requests, counted by the counting build (build/cpu-counters/bench/bench --once)"
	@mkdir -p $(REPORT_BUILD)/results; rm -f $(REPORT_BUILD)/results/access_counts.csv; \
	{ [ -f build/cpu-counters/CMakeCache.txt ] || cmake -S . -B build/cpu-counters $(GENERATOR) -DFLAVOR=cpu -DCOUNTERS=ON; } \
	  >$(REPORT_BUILD)/results/access_counts.log 2>&1 && \
	cmake --build build/cpu-counters -j $(JOBS) --target bench >>$(REPORT_BUILD)/results/access_counts.log 2>&1 && \
	build/cpu-counters/bench/bench --once --csv $(REPORT_BUILD)/results/access_counts.csv \
	  >>$(REPORT_BUILD)/results/access_counts.log 2>&1 || \
	  echo "make report: no memory-counts chart: the counting build failed ($(REPORT_BUILD)/results/access_counts.log)"
	@bash tools/run_lessons.sh --build $(REPORT_BUILD) --results $(REPORT_BUILD)/results --reuse --draw report \
	  -- $(ARGS)
endif

# Lesson 09 runs as RANKS processes under mpirun (Open MPI: root needs its two ALLOW_RUN_AS_ROOT variables).
RANKS ?= 2
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# N is checked before building too, so that a wrong N does not wait for the build.
lesson: build/$(RUN_FLAVOR)/CMakeCache.txt
	@$(call find_lesson,name,$(N),N)
	cmake --build build/$(RUN_FLAVOR) -j $(JOBS) --target lessons
	@$(call find_lesson,name,$(N),N); echo "=== lesson$$name: $(RUN_FLAVOR) flavor, $(RUN_WHERE)"; \
	program=build/$(RUN_FLAVOR)/lessons/lesson$$name; launcher=(); \
	if [[ $$name == 09* ]]; then \
	  [ -x "$$program" ] || { echo "lesson$$name was not built: MPI not found (make deps installs Open MPI)" >&2; exit 2; }; \
	  launcher=(mpirun -n $(RANKS) --oversubscribe); \
	fi; \
	"$${launcher[@]}" "$$program" $(ARGS)

# diff exits 1 when the files differ: that is the answer, not an error; 2 (trouble) still fails.
diff:
	@$(call find_lesson,a,$(A),A); $(call find_lesson,b,$(B),B); \
	color=$$(diff --color=auto /dev/null /dev/null >/dev/null 2>&1 && echo --color=auto); \
	diff -u $$color "lessons/$$a/main.cu" "lessons/$$b/main.cu"; status=$$?; [ $$status -le 1 ] || exit $$status

bench: $(RUN_FLAVOR)
	build/$(RUN_FLAVOR)/bench/backend_bench
	build/$(RUN_FLAVOR)/bench/bench

# tools/mutants.py: one-line planted bugs, each against the tests that must catch it (slow: a rebuild per mutant).
mutants: cpu
	python3 tools/mutants.py build/cpu $(NAMES)

data:
	bash data/download_mnist.sh

clean:
	rm -rf build
