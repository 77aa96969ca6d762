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

# ---- CPU benchmark ------------------------------------------------------------
