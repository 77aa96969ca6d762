# flashattn Makefile. `make test` is what CI runs (see README.md).
# Sections are owned by topic; keep each target's recipe in its section.

CC      ?= cc
CXX     ?= c++
BUILD   := build
JOBS    := $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS += -j$(JOBS)

# nvcc on PATH, else the CUDA toolkit's standard install folder.
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })

WARN     := -Wall -Wextra -Wpedantic -Werror
OPT      := -O2 -march=native
OPENMP   := -fopenmp

.PHONY: all run test test-cpu test-compile test-sanitize test-gpu bench bench-gpu build-all clean

all: test

clean:
	rm -rf $(BUILD)

$(BUILD):
	mkdir -p $(BUILD)

# ---- tests (CPU, compile checks, sanitizers) ---------------------------------

# ---- GPU build, tests and benchmark -------------------------------------------

# ---- examples and demo --------------------------------------------------------
# `make run` builds and runs the demo; `make examples` builds every CPU example
# (each also compiles alone with the command in its header comment);
# `make examples-check` runs the ones that check themselves; `make examples-gpu`
# compiles the GPU example with nvcc (needs flashattn_cuda.cuh).
EXAMPLES_CPU  := cpu_simple online_softmax decode_paged demo
EXAMPLE_BINS  := $(addprefix $(BUILD)/examples/,$(EXAMPLES_CPU))
EXAMPLE_FLAGS := $(WARN) $(OPT) $(OPENMP)
NVCC_GENCODE  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a

.PHONY: examples examples-check examples-gpu

examples: $(EXAMPLE_BINS)

$(BUILD)/examples:
	mkdir -p $@

$(BUILD)/examples/%: examples/%.c flashattn.h | $(BUILD)/examples
	$(CC) $(EXAMPLE_FLAGS) -I. $< -lm -o $@

run: $(BUILD)/examples/demo
	./$(BUILD)/examples/demo

examples-check: $(BUILD)/examples/cpu_simple $(BUILD)/examples/online_softmax $(BUILD)/examples/decode_paged
	./$(BUILD)/examples/cpu_simple > /dev/null
	./$(BUILD)/examples/online_softmax > /dev/null
	./$(BUILD)/examples/decode_paged > /dev/null
	@echo "examples-check: ok"

examples-gpu: $(BUILD)/examples/gpu_simple

$(BUILD)/examples/gpu_simple: examples/gpu_simple.cu flashattn.h flashattn_cuda.cuh | $(BUILD)/examples
	$(NVCC) -O2 -I. $(NVCC_GENCODE) $< -o $@

# ---- CPU benchmark ------------------------------------------------------------
# `make bench` prints a markdown report and saves it as
# bench/results/cpu-<UTC date>-<host kind>.md (HOST_KIND: CPU model and
# logical CPU count, e.g. amd-epyc-2t; override on the command line).
BENCH_CFLAGS := -O3 -march=native -fopenmp
HOST_KIND    ?= $(shell grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$$//' | cut -c1-40)-$(JOBS)t
BENCH_OUT    := bench/results/cpu-$(shell date -u +%Y-%m-%d)-$(HOST_KIND).md

$(BUILD)/bench_cpu: bench/bench_cpu.c flashattn.h | $(BUILD)
	$(CC) $(BENCH_CFLAGS) -Wall -Wextra -DBENCH_FLAGS='"$(BENCH_CFLAGS)"' -I. $< -lm -o $@

bench: $(BUILD)/bench_cpu
	@mkdir -p bench/results
	./$(BUILD)/bench_cpu | tee $(BENCH_OUT).tmp
	mv $(BENCH_OUT).tmp $(BENCH_OUT)
	@echo "saved $(BENCH_OUT)"
