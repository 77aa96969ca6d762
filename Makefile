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
NVFLAGS  := -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
            -Xcompiler -Wall,-Wextra -Werror all-warnings
GPU_TESTS := $(BUILD)/test_gpu_decode

.PHONY: test-gpu-compile
test-gpu-compile: $(GPU_TESTS)

test-gpu: $(GPU_TESTS)
	@for t in $(GPU_TESTS); do ./$$t || exit 1; done

$(BUILD)/test_gpu_decode: tests/test_gpu_decode.cu flashattn.h flashattn_cuda.cuh tests/reference.h tests/test_util.h | $(BUILD)
	$(NVCC) $(NVFLAGS) -Xptxas -v $< -o $@ 2> $@.ptxas.log || { cat $@.ptxas.log; exit 1; }

# ---- examples and demo --------------------------------------------------------

# ---- CPU benchmark ------------------------------------------------------------
