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
NVCC_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
NVCC_FLAGS ?= -std=c++17 -O2 $(NVCC_ARCH)
GPU_DEPS   := flashattn.h flashattn_cuda.cuh tests/reference.h tests/test_util.h

# backward (issue 5): GPU backward vs the fp64 reference and the CPU backward
$(BUILD)/test_gpu_backward: tests/test_gpu_backward.cu $(GPU_DEPS) | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -o $@ $<
$(BUILD)/libflashattn.so: bench/fa_capi.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -fPIC -shared -o $@ $<

# the same test with the backward kernels run on the CPU (no GPU needed; slow:
# every CUDA thread is an OS thread): tests/emu_cuda.h
CUDA_INC ?= $(dir $(NVCC))../include
$(BUILD)/emu_backward.inc: flashattn_cuda.cuh tests/emu_extract.py | $(BUILD)
	python3 tests/emu_extract.py $< $@
$(BUILD)/test_gpu_backward_emu: tests/test_gpu_backward.cu tests/emu_cuda.h $(BUILD)/emu_backward.inc $(GPU_DEPS) | $(BUILD)
	$(CXX) -std=c++20 -O2 -DFA_EMU -x c++ -I$(CUDA_INC) -o $@ $< -lpthread

.PHONY: test-gpu-compile test-gpu-emu
test-gpu-emu: $(BUILD)/test_gpu_backward_emu
	FA_QUICK=1 ./$(BUILD)/test_gpu_backward_emu
test-gpu-compile: $(BUILD)/test_gpu_backward
test-gpu: $(BUILD)/test_gpu_backward
	./$(BUILD)/test_gpu_backward
bench-gpu: $(BUILD)/libflashattn.so
	python3 bench/vs_torch_backward.py --lib $(BUILD)/libflashattn.so

# ---- examples and demo --------------------------------------------------------

# ---- CPU benchmark ------------------------------------------------------------
