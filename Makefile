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
# The GPU half compiles only with nvcc; CI has no GPU, so `make test` runs just
# test-gpu-compile (every GPU source, each architecture, warnings are errors)
# and test-gpu / bench-gpu run on a machine with a GPU.
NVCC_FLAGS     ?= -std=c++17 -O3 -lineinfo
NVCC_WERROR    := -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
GPU_ARCHS      ?= 80 90a
GPU_ARCHS_ALL  := 80 86 89 90a
gencode         = $(foreach a,$(1),-gencode arch=compute_$(a),code=sm_$(a))
GPU_SOURCES    := tests/test_gpu.cu tests/test_gpu_decode.cu $(wildcard examples/*.cu) $(wildcard bench/*.cu)
SANITIZER      ?= compute-sanitizer

$(BUILD)/test_gpu: tests/test_gpu.cu tests/reference.h flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -Xcompiler -fopenmp $< -o $@ -lgomp

$(BUILD)/test_gpu_decode: tests/test_gpu_decode.cu tests/reference.h tests/test_util.h flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) $< -o $@

# Full suites, then the --quick size lists under memcheck, racecheck and synccheck.
GPU_TEST_PROGS := test_gpu test_gpu_decode
test-gpu: $(addprefix $(BUILD)/,$(GPU_TEST_PROGS))
	@set -e; f=0; n=0; \
	for p in $(GPU_TEST_PROGS); do \
	  n=$$((n+4)); $(BUILD)/$$p || f=$$((f+1)); \
	  for t in memcheck racecheck synccheck; do \
	    echo "== compute-sanitizer --tool $$t $$p (quick size list)"; \
	    $(SANITIZER) --tool $$t --error-exitcode 3 $(BUILD)/$$p --quick > $(BUILD)/sanitize-$$p-$$t.log 2>&1 || f=$$((f+1)); \
	    grep -E "passed, .* failed|SUMMARY" $(BUILD)/sanitize-$$p-$$t.log; \
	  done; \
	done; \
	echo "test-gpu: $$((n-f)) passed, $$f failed (each test program and its 3 sanitizer runs)"; \
	test $$f -eq 0

# One compile per (source, architecture): PASS/FAIL lines, counts in
# build/gpu-compile.counts as "passed failed".
define GPU_COMPILE_RULE
$(BUILD)/gpu-compile/$(2)/$(basename $(notdir $(1))).ok: $(1) flashattn.h flashattn_cuda.cuh $(wildcard tests/*.h)
	@mkdir -p $$(@D)
	@if $(NVCC) $(NVCC_FLAGS) $(NVCC_WERROR) $(call gencode,$(2)) -c $(1) -o $$(@:.ok=.o) > $$(@:.ok=.log) 2>&1 \
	   && [ ! -s $$(@:.ok=.log) ]; then echo "PASS gpu-compile sm_$(2) $(1)" > $$@; \
	 else echo "FAIL gpu-compile sm_$(2) $(1) (see $$(@:.ok=.log))" > $$@; fi
endef
$(foreach a,$(GPU_ARCHS_ALL),$(foreach s,$(GPU_SOURCES),$(eval $(call GPU_COMPILE_RULE,$(s),$(a)))))
gpu_compile_oks = $(foreach a,$(1),$(foreach s,$(GPU_SOURCES),$(BUILD)/gpu-compile/$(a)/$(basename $(notdir $(s))).ok))

test-gpu-compile: $(call gpu_compile_oks,$(GPU_ARCHS))
	@cat $^; p=$$(cat $^ | grep -c '^PASS' || true); f=$$(cat $^ | grep -c '^FAIL' || true); \
	for x in $^; do grep -q '^FAIL' $$x && cat $${x%.ok}.log | head -20; done; \
	echo "$$p $$f" > $(BUILD)/gpu-compile.counts; echo "gpu-compile: $$p passed, $$f failed"

build-all: $(call gpu_compile_oks,$(GPU_ARCHS_ALL))
	@cat $^; p=$$(cat $^ | grep -c '^PASS' || true); f=$$(cat $^ | grep -c '^FAIL' || true); \
	echo "$$p $$f" > $(BUILD)/gpu-compile.counts; echo "gpu-compile (sm_80, 86, 89, 90a): $$p passed, $$f failed"

# Benchmark: our kernel alone (bench_gpu) and beside PyTorch SDPA (vs_torch.py,
# through a shared library). Results go to bench/results/.
$(BUILD)/bench_gpu: bench/bench_gpu.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) $< -o $@

$(BUILD)/libfa_bench.so: bench/fa_bench_lib.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -shared -Xcompiler -fPIC $< -o $@

$(BUILD)/libfa_bench_decode.so: bench/fa_bench_decode_lib.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -shared -Xcompiler -fPIC $< -o $@

.PHONY: bench-gpu-decode
bench-gpu-decode: $(BUILD)/libfa_bench_decode.so
	python3 bench/vs_torch_decode.py --lib $< --out bench/results

bench-gpu: $(BUILD)/bench_gpu $(BUILD)/libfa_bench.so
	$(BUILD)/bench_gpu
	python3 bench/vs_torch.py --lib $(BUILD)/libfa_bench.so --out bench/results


# ---- examples and demo --------------------------------------------------------

# ---- CPU benchmark ------------------------------------------------------------
