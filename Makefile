# flashattn Makefile. `make test` is what CI runs (see README.md); `make help`
# lists the targets. Sections are owned by topic; keep each target's recipe in
# its section.

CC      ?= cc
CXX     ?= c++
BUILD   := build
JOBS    := $(shell nproc 2>/dev/null || echo 2)
# (parallel by default; a sub-make shares its parent's job slots)
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(JOBS)
endif

# nvcc on PATH, else the CUDA toolkit's standard install folder.
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
# GPU architectures: make test's and the GPU programs' (GPU section).
GPU_ARCHS      ?= 80 90a
GPU_ARCHS_ALL  := 80 86 89 90a

WARN     := -Wall -Wextra -Wpedantic -Werror
OPT      := -O2 -march=native
OPENMP   := -fopenmp

.PHONY: all help run test test-all test-cpu test-compile test-sanitize test-gpu test-neon bench bench-gpu bench-sparse bench-sparse-fwd bench-sparse-bwd build-all clean

# Plain `make` builds the examples (the test suite is `make test`).
all: examples

help:
	@echo 'make                the CPU examples (build/examples/); make run: the demo'
	@echo 'make test           what CI runs, a few minutes: CPU tests at quick sizes, the header'
	@echo '                    compiled by gcc and clang (a covering part of the matrix), sanitizers,'
	@echo '                    one nvcc translation unit per architecture (GPU_ARCHS), linked and'
	@echo '                    run, and the GPU tests'"'"' kernels (sm_80 and sm_90a; forward, FP8 forward,'
	@echo '                    backward) emulated on the CPU, a part under ASan+UBSan (no GPU needed);'
	@echo '                    last line "N passed, M failed"'
	@echo 'make test-all       test at full size: every CPU variant and compile check, the fuzzer'
	@echo '                    30 s, and every GPU source compiled (tests, examples, benchmarks,'
	@echo '                    ablations, the sm90 traces), the emulated tests on longer lists (also'
	@echo '                    with FA__BWD_SM90_WIDE=0, FLASHATTN_NO_HOPPER and under ASan+UBSan)'
	@echo 'make test-cpu | test-compile | test-sanitize | test-gpu-compile | test-neon | test-gpu-emu'
	@echo '                    one part of the above'
	@echo 'make test-gpu       on a machine with a GPU: the GPU tests, the sanitizers, SASS checks'
	@echo '                    (GPU_SHARDS=n / SAN_SHARDS=n: the full / sanitizer runs split n ways,'
	@echo '                    side by side; test-gpu-hd256: the backward test with FLASHATTN_HEAD_DIMS=256)'
	@echo 'make examples-check the CPU examples, run;  make examples-gpu: the GPU example'
	@echo 'make bench          the CPU benchmark into build/bench/ (RECORD=1: into bench/results/)'
	@echo 'make bench-gpu      the GPU benchmarks (a GPU and PyTorch; RECORD=1 as above)'
	@echo 'make bench-sparse   the block-sparse forward, then backward, beside FlexAttention (SPARSE_FLAGS=--quick)'
	@echo '                    (bench-sparse-fwd, bench-sparse-bwd: one of them)'
	@echo 'make build-all      every GPU source for sm_80, 86, 89 and 90a'
	@echo 'bench/compile_time.sh  nvcc seconds of a user'"'"'s translation unit, per macro'
	@echo 'bench/device_records.sh DIR  the open issues'"'"' GPU records of this tree in one device call (its header)'
	@echo 'make clean'

clean:
	rm -rf $(BUILD)

$(BUILD):
	mkdir -p $(BUILD)

# ---- tests (CPU, compile checks, sanitizers) ---------------------------------
# make test: the quick sizes and parts of the matrices (a few minutes on two
# cores); make test-all sets TEST_QUICK empty: everything at full size.
TEST_QUICK ?= FA_TEST_QUICK=1
# (the results folder made now, not as a job: under -j a job for it would let
# short builds take the slots before the long nvcc units start)
ifneq ($(filter test test-all test-all-results,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD)/results)
endif
# `make test` runs every check below, each writing build/results/<name>.txt
# (one line "N passed, M failed", see tests/run_check.sh), then sums them: the
# LAST line of its output is the total. It exits non-zero if anything failed.
#   test-cpu       CPU tests against the fp64 reference (also the portable
#                  loops with odd tile sizes, and the AVX2 paths with and
#                  without F16C, at the quick sizes) + bad-input tests
#   test-compile   the header as C99 and C++11, static and extern, gcc and
#                  clang, with and without OpenMP (each compile one check);
#                  and under STRICT_WARN as C99, C11, C++17 (strict-*)
#   test-sanitize  the CPU tests under ASan + UBSan (quick sizes), and
#                  tests/test_threads.c under ThreadSanitizer
#   gpu_check_<arch>  GPU_CHECK_TU, one nvcc unit per architecture, when nvcc
#                  exists (GPU section)
#   neon-compile   (NEON section) when an AArch64 cross compiler exists
# `make test-all` adds the CPU variants at full size, test-gpu-compile (every
# GPU source) and test-gpu-knobs.
TEST_RESULTS := $(BUILD)/results
# (no -g: it is a third of a test build's time; the sanitizer builds keep it
# for their stack traces)
TEST_CFLAGS  := $(WARN) -O2
TEST_DEPS    := flashattn.h tests/reference.h tests/test_util.h
SAN_FLAGS    := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g
# (-O0 for programs whose run takes well under a second: the build is the
# cost, half of it at -O0, and ASan is at its most precise there)
SAN_FLAGS_O0 := $(SAN_FLAGS) -O0
RUN_CHECK    := sh tests/run_check.sh
CLANG        := $(shell command -v clang 2>/dev/null)
CLANGXX      := $(shell command -v clang++ 2>/dev/null)

$(TEST_RESULTS):
	mkdir -p $(TEST_RESULTS)

$(BUILD)/test_cpu: tests/test_cpu.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) $(OPT) $(OPENMP) -o $@ tests/test_cpu.c -lm -lpthread

$(BUILD)/test_bad_input: tests/test_bad_input.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) -o $@ tests/test_bad_input.c -lm

# The portable C loops (no SIMD) with odd tile sizes, so every tile edge case shows.
$(BUILD)/test_cpu_portable: tests/test_cpu.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) $(OPENMP) -DFLASHATTN_NO_SIMD -DFLASHATTN_CPU_BR=5 -DFLASHATTN_CPU_BC=3 \
	  -o $@ tests/test_cpu.c -lm -lpthread

# The AVX2 + FMA paths (8 lanes, no AVX-512), with and without F16C (the f16
# rows of the few-row decode tiles convert by instruction or lane by lane):
# -march=native on an AVX-512 machine never compiles them.
AVX2_FLAGS := -mavx2 -mfma -mno-avx512f
$(BUILD)/test_cpu_avx2: tests/test_cpu.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) $(AVX2_FLAGS) -mf16c $(OPENMP) -o $@ tests/test_cpu.c -lm -lpthread

$(BUILD)/test_cpu_avx2_nof16c: tests/test_cpu.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) $(AVX2_FLAGS) -mno-f16c $(OPENMP) -o $@ tests/test_cpu.c -lm -lpthread

# Concurrent calls while another thread switches the parallel-for, under
# ThreadSanitizer (no OpenMP: libgomp is not instrumented).
$(BUILD)/test_threads_tsan: tests/test_threads.c flashattn.h | $(BUILD)
	$(CC) -std=c99 $(WARN) -fsanitize=thread -O1 -g -march=native -o $@ tests/test_threads.c -lm -lpthread

$(BUILD)/test_cpu_san: tests/test_cpu.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(WARN) $(SAN_FLAGS) -o $@ tests/test_cpu.c -lm -lpthread

$(BUILD)/test_bad_input_san: tests/test_bad_input.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(WARN) $(SAN_FLAGS_O0) -o $@ tests/test_bad_input.c -lm

.PHONY: FORCE
FORCE:

# The CPU tests run at the quick sizes in `make test`, at full size in
# `make test-all` (TEST_QUICK empty), which also runs the whole compile
# matrices and the fuzzer longer (see below).
# OpenMP's threads sleep at barriers instead of spinning (OMP_ENV): the runs
# share the cores with other jobs, which a spinning thread slows (on two
# cores: 3-4 s of CPU a run).
quick_tag   = $(if $(TEST_QUICK),quick,full size)
OMP_ENV    := OMP_WAIT_POLICY=passive
$(TEST_RESULTS)/cpu.txt: $(BUILD)/test_cpu FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_cpu ($(quick_tag))" env $(OMP_ENV) $(TEST_QUICK) $(BUILD)/test_cpu

$(TEST_RESULTS)/cpu_portable.txt: $(BUILD)/test_cpu_portable FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_cpu, portable loops, Br=5 Bc=3 ($(quick_tag))" env $(OMP_ENV) $(TEST_QUICK) $(BUILD)/test_cpu_portable

$(TEST_RESULTS)/cpu_avx2.txt: $(BUILD)/test_cpu_avx2 FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_cpu, AVX2 + FMA + F16C ($(quick_tag))" env $(OMP_ENV) $(TEST_QUICK) $(BUILD)/test_cpu_avx2

$(TEST_RESULTS)/cpu_avx2_nof16c.txt: $(BUILD)/test_cpu_avx2_nof16c FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_cpu, AVX2 + FMA without F16C ($(quick_tag))" env $(OMP_ENV) $(TEST_QUICK) $(BUILD)/test_cpu_avx2_nof16c

$(TEST_RESULTS)/bad_input.txt: $(BUILD)/test_bad_input FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_bad_input" $(BUILD)/test_bad_input

SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 FA_TEST_QUICK=1
# (the longest CPU run: its build in its recipe, so that it starts with the
# first free job slot instead of after every other build; make test's runs
# one dtype a case, FA_TEST_QUICK=2)
SAN_CPU_QUICK := $(if $(TEST_QUICK),2,1)
$(TEST_RESULTS)/san_cpu.txt: FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_cpu under ASan+UBSan (FA_TEST_QUICK=$(SAN_CPU_QUICK))" sh -c '$(MAKE) --no-print-directory \
	  $(BUILD)/test_cpu_san && env $(SAN_ENV) FA_TEST_QUICK=$(SAN_CPU_QUICK) $(BUILD)/test_cpu_san'

$(TEST_RESULTS)/threads_tsan.txt: $(BUILD)/test_threads_tsan FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_threads under ThreadSanitizer" env TSAN_OPTIONS=halt_on_error=1:exitcode=66 $(BUILD)/test_threads_tsan

$(TEST_RESULTS)/san_bad_input.txt: $(BUILD)/test_bad_input_san FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_bad_input under ASan+UBSan" env $(SAN_ENV) $(BUILD)/test_bad_input_san

# Compile checks: <compiler>-<language>-<linkage>-<openmp>. Static: the
# implementation and its user in one file under FLASHATTN_STATIC; extern: the
# implementation in tests/compile_impl.c, its user in tests/compile_use.c,
# compiled separately and linked.
COMPILE_CCS   := gcc $(if $(CLANG),clang)
COMPILE_CHECKS := $(foreach cc,$(COMPILE_CCS),$(foreach lang,c99 cxx11,$(foreach link,static extern,\
                  $(foreach omp,noomp omp,$(TEST_RESULTS)/compile-$(cc)-$(lang)-$(link)-$(omp).txt))))

# make test compiles a covering part: each compiler with each language of
# the plain checks, and every compiler, language, linkage, OpenMP setting and
# target at least once (TEST_QUICK empty: all of them).
COMPILE_QUICK := gcc-c99-static-omp gcc-cxx11-extern-noomp clang-c99-extern-noomp clang-cxx11-static-omp
compile_run    = $(if $(TEST_QUICK),$(filter $(foreach c,$(2),$(TEST_RESULTS)/$(1)-$(c).txt),$(3)),$(3))

compile_driver = $(if $(filter clang,$(1)),$(if $(filter cxx11,$(2)),$(CLANGXX),$(CLANG)),$(if $(filter cxx11,$(2)),g++,gcc))
compile_std    = $(if $(filter cxx11,$(1)),-x c++ -std=c++11,-std=c99)
compile_omp    = $(if $(filter omp,$(1)),$(OPENMP))
compile_dir    = $(BUILD)/compile/$(1)-$(2)-$(3)-$(4)

# $(call compile_cmd,cc,lang,link,omp)
compile_cmd = sh -c 'set -e; d=$(call compile_dir,$(1),$(2),$(3),$(4)); mkdir -p $$d; \
  cc="$(call compile_driver,$(1),$(2))"; flags="$(call compile_std,$(2)) $(WARN) -O2 $(call compile_omp,$(4))"; \
  if [ $(3) = static ]; then $$cc $$flags -c tests/compile_static.c -o $$d/static.o; \
    $$cc $(call compile_omp,$(4)) $$d/static.o -o $$d/prog -lm; \
  else $$cc $$flags -c tests/compile_impl.c -o $$d/impl.o; $$cc $$flags -c tests/compile_use.c -o $$d/use.o; \
    $$cc $(call compile_omp,$(4)) $$d/impl.o $$d/use.o -o $$d/prog -lm; fi'

# Strict compile checks: the implementation and its user (tests/compile_static.c)
# under a game engine's warning flags, STRICT_WARN, as C99, C11 and C++17, gcc
# and clang, for the generic target, -march=native and (x86) AVX2 without
# AVX-512. strict-<cc>-<lang>-<arch>.
STRICT_WARN   := -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wdouble-promotion -Werror
STRICT_ARCHS  := generic native $(if $(filter x86_64 i686 i386,$(shell uname -m)),avx2)
STRICT_CHECKS := $(foreach cc,$(COMPILE_CCS),$(foreach lang,c99 c11 cxx17,$(foreach arch,$(STRICT_ARCHS),\
                 $(TEST_RESULTS)/strict-$(cc)-$(lang)-$(arch).txt)))
STRICT_QUICK  := gcc-c99-native gcc-cxx17-avx2 clang-c11-generic clang-cxx17-native
strict_std  = $(if $(filter cxx17,$(1)),-x c++ -std=c++17,-std=$(1))
strict_arch = $(if $(filter native,$(1)),-march=native,$(if $(filter avx2,$(1)),$(AVX2_FLAGS) -mf16c))
$(TEST_RESULTS)/strict-%.txt: flashattn.h tests/compile_use.c tests/compile_static.c FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "strict warnings $*" $(call compile_driver,$(call compile_word,1),$(if $(filter cxx17,\
	  $(call compile_word,2)),cxx11)) $(call strict_std,$(call compile_word,2)) $(STRICT_WARN) \
	  $(call strict_arch,$(call compile_word,3)) -O2 $(OPENMP) -c tests/compile_static.c -o /dev/null

compile_word = $(word $(1),$(subst -, ,$*))
$(TEST_RESULTS)/compile-%.txt: flashattn.h tests/compile_use.c tests/compile_impl.c tests/compile_static.c FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "compile $*" \
	  $(call compile_cmd,$(call compile_word,1),$(call compile_word,2),$(call compile_word,3),$(call compile_word,4))

# GPU: `make test` compiles GPU_CHECK_TU (GPU section) once per architecture
# of GPU_ARCHS, linked and run (gpu_check_<arch>.txt); `make test-all` also
# runs test-gpu-compile, every GPU source (gpu_compile.txt). Both only when
# nvcc exists. A last "...: N passed, M failed" line is the count (else the
# step counts as one check).
$(TEST_RESULTS)/gpu_check_%.txt: FORCE | $(TEST_RESULTS)
	@if [ -z "$(NVCC)" ]; then echo "nvcc not found: skipping the GPU translation unit for sm_$*"; \
	  echo "0 passed, 0 failed" > $@; \
	else $(RUN_CHECK) $@ "$(GPU_CHECK_TU) for sm_$* (nvcc, warnings are errors; then run)" \
	  sh -c '$(MAKE) --no-print-directory $(call gpu_check_bin,$*) && $(call gpu_check_bin,$*)'; fi

$(TEST_RESULTS)/gpu_compile.txt: FORCE | $(TEST_RESULTS)
	@if [ -z "$(NVCC)" ]; then echo "nvcc not found: skipping the GPU compile checks"; echo "0 passed, 0 failed" > $@; \
	elif ! $(MAKE) --no-print-directory -n test-gpu-compile > /dev/null 2>&1; then \
	  echo "test-gpu-compile is not defined (no GPU section in this Makefile): skipping the GPU compile checks"; \
	  echo "0 passed, 0 failed" > $@; \
	else $(RUN_CHECK) $@ "GPU compile checks (make test-gpu-compile)" $(MAKE) --no-print-directory test-gpu-compile; fi

# NEON compile check: the NEON section's neon-compile when an AArch64 cross
# compiler with its C library headers exists, else skipped (CI has none, and
# `make test` installs nothing). `make test-neon` also RUNS the tests, under qemu.
$(TEST_RESULTS)/neon_compile.txt: FORCE | $(TEST_RESULTS)
	@why=$$($(call neon_missing)); if [ -n "$$why" ]; then \
	  echo "NEON compile check skipped ($$why)"; echo "0 passed, 0 failed" > $@; \
	else $(RUN_CHECK) $@ "NEON compile check (make neon-compile)" $(MAKE) --no-print-directory neon-compile; fi

# (AVX2 without F16C in make test-all only: F16C's absence changes the f16 rows
# of decode's few-row tiles alone)
CPU_RESULTS      := $(TEST_RESULTS)/cpu.txt $(TEST_RESULTS)/cpu_portable.txt $(TEST_RESULTS)/cpu_avx2.txt \
                    $(if $(TEST_QUICK),,$(TEST_RESULTS)/cpu_avx2_nof16c.txt) $(TEST_RESULTS)/bad_input.txt
SANITIZE_RESULTS := $(TEST_RESULTS)/san_cpu.txt $(TEST_RESULTS)/san_bad_input.txt $(TEST_RESULTS)/threads_tsan.txt
# (the longest jobs first, as they start under -j: the nvcc units, then the
# sanitized test_cpu)
GPU_CHECK_RESULTS := $(foreach a,$(GPU_ARCHS),$(TEST_RESULTS)/gpu_check_$(a).txt)
# (the GPU tests emulated on the CPU, their rules in the GPU section; the
# forward's whole quick list in two shards in make test-all)
EMU_RESULTS      := $(TEST_RESULTS)/gpu_emu_fwd_san.txt $(TEST_RESULTS)/gpu_emu_fwd.txt \
                    $(if $(TEST_QUICK),,$(TEST_RESULTS)/gpu_emu_fwd2.txt $(TEST_RESULTS)/gpu_emu_san.txt \
                                        $(TEST_RESULTS)/gpu_emu_fp8_san.txt $(TEST_RESULTS)/gpu_emu_fwd_nohopper.txt \
                                        $(TEST_RESULTS)/gpu_emu_dec_san.txt) \
                    $(TEST_RESULTS)/gpu_emu.txt $(TEST_RESULTS)/gpu_emu_fp8.txt $(TEST_RESULTS)/gpu_emu_nohopper.txt \
                    $(TEST_RESULTS)/gpu_emu_dec.txt
ALL_RESULTS      := $(GPU_CHECK_RESULTS) $(EMU_RESULTS) $(SANITIZE_RESULTS) $(CPU_RESULTS) \
                    $(call compile_run,compile,$(COMPILE_QUICK),$(COMPILE_CHECKS)) \
                    $(call compile_run,strict,$(STRICT_QUICK),$(STRICT_CHECKS)) \
                    $(TEST_RESULTS)/neon_compile.txt

# The headers carry no dates, "UTC" or commit hashes (tests/check_headers.sh):
# measurements and their history live in bench/results/LOG.md and docs/NOTES.md.
$(TEST_RESULTS)/check_headers.txt: tests/check_headers.sh flashattn.h flashattn_cuda.cuh FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "tests/check_headers.sh (no dates, UTC or commit hashes in the headers)" sh tests/check_headers.sh
ALL_RESULTS += $(TEST_RESULTS)/check_headers.txt

# ---- examples run, argument fuzzing, the _cuda calls' arguments (issue 47) ----
#   examples.txt   the self-checking CPU examples built with ASan + UBSan
#                  (make test-all: also as `make examples` builds them) and
#                  the demo, run, and what each prints checked
#                  (tests/run_examples.sh)
#   fuzz.txt       tests/fuzz_args.c for FUZZ_SECONDS (10 s; test-all 30 s): libFuzzer under
#                  ASan + UBSan when clang has it, else the seeded random
#                  driver under ASan + UBSan; `make fuzz SECONDS=n` runs longer
#   gpu_check_<arch>.txt  tests/test_cuda_args.cu, make test's GPU unit
#                  (GPU_CHECK_TU: one nvcc unit per architecture, the default
#                  macros, every head dim): every _cuda call and workspace
#                  query with its pointers unreadable by the host; no GPU
#                  needed; skipped without nvcc
FUZZ_SECONDS  ?= $(if $(TEST_QUICK),10,30)
SECONDS       ?= 300
EXAMPLES_SAN  := cpu_simple online_softmax decode_paged block_sparse fp8 backward
EXAMPLES_RUN  := $(if $(TEST_QUICK),,$(EXAMPLES_SAN)) demo
FUZZ_DEPS     := tests/fuzz_args.c flashattn.h tests/run_fuzz.sh

$(BUILD)/examples-san/%: examples/%.c flashattn.h
	@mkdir -p $(@D)
	$(CC) $(WARN) $(SAN_FLAGS_O0) -I. $< -lm -o $@

$(TEST_RESULTS)/examples.txt: $(addprefix $(BUILD)/examples/,$(EXAMPLES_RUN)) \
                              $(addprefix $(BUILD)/examples-san/,$(EXAMPLES_SAN)) tests/run_examples.sh FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "examples, run and their output checked" env $(SAN_ENV) \
	  EXAMPLES_PLAIN=$(if $(TEST_QUICK),no,yes) sh tests/run_examples.sh $(BUILD)/examples $(BUILD)/examples-san

# libFuzzer's build can fail (a clang without it): then the file is absent and
# tests/run_fuzz.sh runs the random driver instead.
$(BUILD)/fuzz_args_lf: $(FUZZ_DEPS) | $(BUILD)
	@if [ -n "$(CLANG)" ] && $(CLANG) -std=c99 $(WARN) -Wno-pedantic -DFUZZ_LIBFUZZER -fsanitize=fuzzer $(SAN_FLAGS) \
	     tests/fuzz_args.c -lm -o $@ > $@.log 2>&1; then echo "built $@ (libFuzzer)"; \
	 else rm -f $@; echo "no libFuzzer (see $@.log): tests/run_fuzz.sh uses the random driver"; fi
$(BUILD)/fuzz_args: $(FUZZ_DEPS) | $(BUILD)
	$(CC) -std=c99 $(WARN) $(SAN_FLAGS) tests/fuzz_args.c -lm -o $@

# (the random driver built only where libFuzzer is missing: run_fuzz.sh runs one)
$(TEST_RESULTS)/fuzz.txt: $(BUILD)/fuzz_args_lf FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "fuzz_args ($(FUZZ_SECONDS) s)" sh -c '{ [ -x $(BUILD)/fuzz_args_lf ] || \
	  $(MAKE) --no-print-directory $(BUILD)/fuzz_args; } && env $(SAN_ENV) sh tests/run_fuzz.sh $(FUZZ_SECONDS) \
	  $(BUILD)/fuzz_args_lf $(BUILD)/fuzz_args $(BUILD)/fuzz_corpus'

.PHONY: fuzz
fuzz: $(BUILD)/fuzz_args_lf $(BUILD)/fuzz_args
	@env $(SAN_ENV) sh tests/run_fuzz.sh $(SECONDS) $(BUILD)/fuzz_args_lf $(BUILD)/fuzz_args $(BUILD)/fuzz_corpus

ALL_RESULTS += $(TEST_RESULTS)/examples.txt $(TEST_RESULTS)/fuzz.txt

# FP8 (e4m3) on the CPU: conversions, fa_quantize, the forward on e4m3 (issue 49).
$(BUILD)/test_fp8: tests/test_fp8.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) $(OPT) -o $@ tests/test_fp8.c -lm
$(BUILD)/test_fp8_san: tests/test_fp8.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(WARN) $(SAN_FLAGS) -o $@ tests/test_fp8.c -lm
# ... and with the portable loops, odd CPU tiles and small FP8 blocks (many per sequence).
$(BUILD)/test_fp8_portable: tests/test_fp8.c $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) -DFLASHATTN_NO_SIMD -DFLASHATTN_CPU_BR=5 -DFLASHATTN_CPU_BC=3 \
	  -DFLASHATTN_FP8_BLOCK_Q=16 -DFLASHATTN_FP8_BLOCK_K=32 -o $@ tests/test_fp8.c -lm
$(TEST_RESULTS)/fp8.txt: $(BUILD)/test_fp8 FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_fp8" $(BUILD)/test_fp8
$(TEST_RESULTS)/fp8_portable.txt: $(BUILD)/test_fp8_portable FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_fp8 (portable loops, odd tiles, FP8 blocks of 16 / 32)" $(BUILD)/test_fp8_portable
$(TEST_RESULTS)/san_fp8.txt: $(BUILD)/test_fp8_san FORCE | $(TEST_RESULTS)
	@$(RUN_CHECK) $@ "test_fp8 --quick under ASan+UBSan" env $(SAN_ENV) $(BUILD)/test_fp8_san --quick
CPU_RESULTS      += $(TEST_RESULTS)/fp8.txt $(TEST_RESULTS)/fp8_portable.txt
SANITIZE_RESULTS += $(TEST_RESULTS)/san_fp8.txt
ALL_RESULTS      += $(TEST_RESULTS)/fp8.txt $(TEST_RESULTS)/fp8_portable.txt $(TEST_RESULTS)/san_fp8.txt

# Sum result files; the last line printed is "N passed, M failed".
sum_results = for f in $(1); do tail -n 1 $$f; done | \
  awk '{p += $$1; f += $$3} END {printf "%d passed, %d failed\n", p, f; exit (f > 0)}'

test-cpu: $(CPU_RESULTS)
	@$(call sum_results,$^)
test-compile: $(COMPILE_CHECKS) $(STRICT_CHECKS)
	@$(call sum_results,$^)
test-sanitize: $(SANITIZE_RESULTS)
	@$(call sum_results,$^)
test: $(ALL_RESULTS)
	@$(call sum_results,$^)
test-all:
	@$(MAKE) --no-print-directory test-all-results TEST_QUICK=
.PHONY: test-all-results
test-all-results: $(TEST_RESULTS)/gpu_compile.txt $(GPU_KNOBS_RESULTS) $(TEST_RESULTS)/gpu_emu_narrow.txt \
                  $(TEST_RESULTS)/gpu_emu_atomics.txt $(ALL_RESULTS)
	@$(call sum_results,$^)

# ---- GPU build, tests and benchmark -------------------------------------------
# The GPU half compiles only with nvcc; CI has no GPU, so `make test` compiles
# GPU_CHECK_TU once per architecture (every head dim, warnings are errors) and
# runs it (its checks need no GPU); `make test-all` adds test-gpu-compile
# (every GPU source); test-gpu / bench-gpu run on a machine with a GPU.
# --split-compile=0: cicc and ptxas take a kernel a core (no kernel timed slower
# by 1%, bench/results/2026-12-05_NVIDIA-H200_split-compile-ab.md).
NVCC_FLAGS     ?= -std=c++17 -O3 -lineinfo --split-compile=0
NVCC_WERROR    := -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
gencode         = $(foreach a,$(1),-gencode arch=compute_$(a),code=sm_$(a))
GPU_BENCH_SOURCES := $(wildcard bench/*.cu) $(wildcard bench/micro/*.cu)
GPU_SOURCES    := tests/test_gpu.cu tests/test_gpu_decode.cu tests/test_gpu_backward.cu $(wildcard examples/*.cu) \
                  $(GPU_BENCH_SOURCES)
# make test's GPU translation unit: the implementation with the default macros,
# the host pass for this machine (its CPU path must be the SIMD one it allows).
GPU_CHECK_TU   ?= tests/test_cuda_args.cu
gpu_check_bin   = $(BUILD)/gpu-check/sm_$(1)/$(basename $(notdir $(GPU_CHECK_TU)))
define GPU_CHECK_RULE
$(call gpu_check_bin,$(1)): $(GPU_CHECK_TU) flashattn.h flashattn_cuda.cuh $(wildcard tests/*.h)
	@mkdir -p $$(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_WERROR) -Xcompiler -march=native -I. $(call gencode,$(1)) $$< -o $$@
endef
$(foreach a,$(sort $(GPU_ARCHS) $(GPU_ARCHS_ALL)),$(eval $(call GPU_CHECK_RULE,$(a))))

# The trimming macros (tests/test_gpu_knobs.cu; no GPU needed), sm_80 code:
# knobs_hd128 with FLASHATTN_HEAD_DIMS=128, knobs_min with d 64 alone and
# neither decode nor backward, knobs_nohopper as knobs_hd128 without the sm_90a kernels.
KNOBS_hd128    := -DFLASHATTN_HEAD_DIMS=128
KNOBS_min      := -DFLASHATTN_HEAD_DIMS=64 -DFLASHATTN_NO_DECODE -DFLASHATTN_NO_BACKWARD
KNOBS_nohopper := -DFLASHATTN_HEAD_DIMS=128 -DFLASHATTN_NO_HOPPER
$(BUILD)/gpu-check/knobs_%: tests/test_gpu_knobs.cu flashattn.h flashattn_cuda.cuh tests/test_util.h tests/reference.h
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_WERROR) -I. $(KNOBS_$*) $(call gencode,80) $< -o $@
$(TEST_RESULTS)/gpu_knobs_%.txt: FORCE | $(TEST_RESULTS)
	@if [ -z "$(NVCC)" ]; then echo "nvcc not found: skipping tests/test_gpu_knobs.cu ($*)"; echo "0 passed, 0 failed" > $@; \
	else $(RUN_CHECK) $@ "tests/test_gpu_knobs.cu, $(KNOBS_$*)" \
	  sh -c '$(MAKE) --no-print-directory $(BUILD)/gpu-check/knobs_$* && $(BUILD)/gpu-check/knobs_$*'; fi
GPU_KNOBS_RESULTS := $(TEST_RESULTS)/gpu_knobs_hd128.txt $(TEST_RESULTS)/gpu_knobs_min.txt \
                     $(TEST_RESULTS)/gpu_knobs_nohopper.txt
.PHONY: test-gpu-knobs
test-gpu-knobs: $(GPU_KNOBS_RESULTS)
	@$(call sum_results,$^)
SANITIZER      ?= compute-sanitizer
CUOBJDUMP      ?= $(shell command -v cuobjdump 2>/dev/null || echo $(dir $(NVCC))cuobjdump)

$(BUILD)/test_gpu: tests/test_gpu.cu tests/reference.h tests/bmask_lists.h tests/shard.h flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -Xcompiler -fopenmp $< -o $@ -lgomp

# backward (issue 5): fa_backward_cuda vs the fp64 reference and the CPU backward
$(BUILD)/test_gpu_backward: tests/test_gpu_backward.cu tests/reference.h tests/bmask_lists.h tests/shard.h tests/test_util.h flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) $< -o $@

# The GPU tests with the kernels run on the CPU, no GPU needed (every CUDA
# thread a fiber; see tests/emu_cuda.h): test_gpu_backward (the backward),
# test_gpu (the forward, sm_80 and sm_90a kernels) and test_gpu_fp8 (the FP8
# forward; its inputs quantized by the CPU fa_quantize).
# The toolkit's headers, where nvcc itself looks (nvcc may be a wrapper script
# outside the toolkit, so its own directory does not tell).
ifeq ($(origin CUDA_INC)$(if $(NVCC),,none),undefined)
CUDA_INC := $(or $(shell $(NVCC) --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | \
              sed -n 's/^\#\$$ INCLUDES="-I\([^"]*\)".*/\1/p'),$(dir $(NVCC))../include)
endif
EMU_DEPS = tests/emu_cuda.h tests/emu_cuda90.h tests/bmask_lists.h tests/shard.h tests/cuda_check.h \
           flashattn_cuda.cuh tests/reference.h tests/test_util.h flashattn.h
EMU_CXX  = $(CXX) -std=c++20 $(EMU_OPT) -Wno-psabi -DFA_EMU -x c++ -I$(CUDA_INC)
EMU_OPT  = -O2
# (_narrow: the sm_90a backward's 64-row steps at D 64 too, FA__BWD_SM90_WIDE=0;
# _atomics: its D 256 dQ by atomics and the deterministic mode by slices there,
# FA__BWD_SM90_BULK256=0;
# _nohopper: built with FLASHATTN_NO_HOPPER, the sm_80 kernels alone; _san:
# under AddressSanitizer and UBSan, the kernels' global-memory accesses (host
# allocations there) and their integer arithmetic checked)
$(BUILD)/test_gpu_backward_emu_narrow: EMU_FLAGS = -DFA__BWD_SM90_WIDE=0
$(BUILD)/test_gpu_backward_emu_atomics: EMU_FLAGS = -DFA__BWD_SM90_BULK256=0
$(BUILD)/test_gpu_backward_emu_nohopper $(BUILD)/test_gpu_emu_nohopper: EMU_FLAGS = -DFA_EMU_NO_SM90
# (-g1: line tables, enough for the sanitizers' stack traces; full -g took the
# emulated forward's compile from about 70 s to 117 s in make test)
$(BUILD)/%_san: EMU_OPT = -O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
EMU_BWD_BINS = $(addprefix $(BUILD)/test_gpu_backward_emu,_narrow _atomics _nohopper _san)
$(BUILD)/test_gpu_backward_emu $(EMU_BWD_BINS): tests/test_gpu_backward.cu $(EMU_DEPS) | $(BUILD)
	$(EMU_CXX) $(EMU_FLAGS) -o $@ $< -lpthread
$(BUILD)/test_gpu_emu $(BUILD)/test_gpu_emu_nohopper $(BUILD)/test_gpu_emu_san: tests/test_gpu.cu $(EMU_DEPS) | $(BUILD)
	$(EMU_CXX) $(EMU_FLAGS) -o $@ $< -lpthread
$(BUILD)/test_gpu_fp8_fwd_emu $(BUILD)/test_gpu_fp8_fwd_emu_san: tests/test_gpu_fp8.cu tests/fp8_attn.h $(EMU_DEPS) | $(BUILD)
	$(EMU_CXX) -o $@ $< -lpthread
$(BUILD)/test_gpu_decode_emu $(BUILD)/test_gpu_decode_emu_san: tests/test_gpu_decode.cu $(EMU_DEPS) | $(BUILD)
	$(EMU_CXX) -o $@ $< -lpthread
EMU_SAN_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
.PHONY: test-gpu-emu
test-gpu-emu: $(BUILD)/test_gpu_backward_emu $(BUILD)/test_gpu_emu $(BUILD)/test_gpu_fp8_fwd_emu $(BUILD)/test_gpu_decode_emu
	FA_QUICK=1 $(BUILD)/test_gpu_backward_emu
	$(BUILD)/test_gpu_emu --quick
	$(BUILD)/test_gpu_fp8_fwd_emu --quick
	$(BUILD)/test_gpu_decode_emu --quick

# In make test: the backward's quick list (each case on the sm_90a kernel,
# then on 3 persistent blocks and on the sm_80 kernel), also with
# FLASHATTN_NO_HOPPER, the forward's EMU_FWD_CASES (below; each case on the
# sm_90a kernel, then on the sm_80 kernel), EMU_SAN_CASES under the
# sanitizers, the FP8 forward's quick list and decode's. In make test-all:
# also the backward with FA__BWD_SM90_WIDE=0, the forward's whole quick list
# (about 25 minutes of one core, in two shards), decode's whole list (about a
# minute and a half) and the longer sanitized and FLASHATTN_NO_HOPPER sets.
# Only where nvcc (its headers) is.
emu_check = if [ -z "$(NVCC)" ]; then echo "nvcc not found: skipping the emulated GPU tests"; \
	  echo "0 passed, 0 failed" > $(1); else $(RUN_CHECK) $(1) "$(2)" \
	  sh -c '$(MAKE) --no-print-directory $(3) && env FA_QUICK=1 $(5) $(3) $(4)'; fi
$(TEST_RESULTS)/gpu_emu.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU backward emulated on the CPU (quick list),$(BUILD)/test_gpu_backward_emu,)
$(TEST_RESULTS)/gpu_emu_narrow.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU backward emulated on the CPU with FA__BWD_SM90_WIDE=0 (quick list),$(BUILD)/test_gpu_backward_emu_narrow,)
$(TEST_RESULTS)/gpu_emu_atomics.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU backward emulated on the CPU with FA__BWD_SM90_BULK256=0 (quick list),$(BUILD)/test_gpu_backward_emu_atomics,)
# FLASHATTN_NO_HOPPER (the users' macro) on the emulator: the backward's quick
# list in make test, the forward's EMU_FWD_CASES in make test-all
$(TEST_RESULTS)/gpu_emu_nohopper.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU backward emulated on the CPU with FLASHATTN_NO_HOPPER (quick list),$(BUILD)/test_gpu_backward_emu_nohopper,)
$(TEST_RESULTS)/gpu_emu_fwd_nohopper.txt: export FA_TEST_ONLY = $(EMU_FWD_CASES)
$(TEST_RESULTS)/gpu_emu_fwd_nohopper.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU forward emulated on the CPU with FLASHATTN_NO_HOPPER (EMU_FWD_CASES),$(BUILD)/test_gpu_emu_nohopper,--quick)
# The forward's cases in make test (test_gpu's names, FA_TEST_ONLY): small
# ones that reach the sm_90a kernel's shapes at d 64 (two, three and four
# consumer warpgroups), 128 and 256, the flat walk, O by TMA and by the
# warpgroups, persistent grids capped, tiles without keys, masks, GQA / MQA,
# variable lengths, strides, padded head dims, block masks, and the sm_80
# kernel's extras (softcap, ALiBi, dropout, a negative scale): about 35 s of
# one core.
# (a comma-separated list: the line breaks must not add spaces)
EMU_FWD_CASES := d64 sq113 sk203,d128 sq203 sk113,d256 sq113 sk203,d64 causal sq > sk,dv 60 203x300
EMU_FWD_CASES := $(EMU_FWD_CASES),200x333 7 heads,GQA 8/2 causal,varlen b4 causal,seqlens_k b3 causal
EMU_FWD_CASES := $(EMU_FWD_CASES),400x100 causal,block mask 50%,padded strides MQA,window (17,softcap 3
EMU_FWD_CASES := $(EMU_FWD_CASES),alibi causal,dropout 0.17,padded dims (40,negative scale,block mask 0%
EMU_FWD_CASES := $(EMU_FWD_CASES),d 8 causal,MQA 6/1,padded strides varlen
$(TEST_RESULTS)/gpu_emu_fwd.txt: export FA_TEST_ONLY = $(if $(TEST_QUICK),$(EMU_FWD_CASES))
$(TEST_RESULTS)/gpu_emu_fwd.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU forward emulated on the CPU ($(if $(TEST_QUICK),EMU_FWD_CASES,quick list shard 1 of 2)),$(BUILD)/test_gpu_emu,--quick,$(if $(TEST_QUICK),,FA_TEST_SHARD=0/2))
$(TEST_RESULTS)/gpu_emu_fwd2.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU forward emulated on the CPU (quick list shard 2 of 2),$(BUILD)/test_gpu_emu,--quick,FA_TEST_SHARD=1/2)
$(TEST_RESULTS)/gpu_emu_fp8.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU FP8 forward emulated on the CPU (quick list),$(BUILD)/test_gpu_fp8_fwd_emu,--quick)
$(TEST_RESULTS)/gpu_emu_dec.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU decode emulated on the CPU ($(if $(TEST_QUICK),quick list,whole list)),$(BUILD)/test_gpu_decode_emu,$(if $(TEST_QUICK),--quick))
# Under the sanitizers (about ten times slower): in make test EMU_SAN_CASES;
# in make test-all EMU_FWD_CASES (about 2.5 min), the backward's, the FP8
# forward's and decode's quick lists.
EMU_SAN_CASES := d64 sq113 sk203,d128 sq203 sk113,d256 sq113 sk203,200x333 7 heads
$(TEST_RESULTS)/gpu_emu_fwd_san.txt: export FA_TEST_ONLY = $(if $(TEST_QUICK),$(EMU_SAN_CASES),$(EMU_FWD_CASES))
$(TEST_RESULTS)/gpu_emu_fwd_san.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU forward emulated on the CPU under ASan+UBSan ($(if $(TEST_QUICK),EMU_SAN_CASES,EMU_FWD_CASES)),$(BUILD)/test_gpu_emu_san,--quick,$(EMU_SAN_ENV))
$(TEST_RESULTS)/gpu_emu_san.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU backward emulated on the CPU under ASan+UBSan (quick list),$(BUILD)/test_gpu_backward_emu_san,,$(EMU_SAN_ENV))
$(TEST_RESULTS)/gpu_emu_fp8_san.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU FP8 forward emulated on the CPU under ASan+UBSan (quick list),$(BUILD)/test_gpu_fp8_fwd_emu_san,--quick,$(EMU_SAN_ENV))
$(TEST_RESULTS)/gpu_emu_dec_san.txt: FORCE | $(TEST_RESULTS)
	@$(call emu_check,$@,GPU decode emulated on the CPU under ASan+UBSan (quick list),$(BUILD)/test_gpu_decode_emu_san,--quick,$(EMU_SAN_ENV))

# The backward test with one head dim compiled, 256: every head dim runs on
# the d256 kernels (FLASHATTN_HEAD_DIMS: the next compiled size up). On a GPU:
# make test-gpu-hd256.
$(BUILD)/test_gpu_backward_hd256: tests/test_gpu_backward.cu tests/reference.h tests/test_util.h flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -DFLASHATTN_HEAD_DIMS=256 $(call gencode,$(GPU_ARCHS)) $< -o $@
.PHONY: test-gpu-hd256
test-gpu-hd256: $(BUILD)/test_gpu_backward_hd256
	$(BUILD)/test_gpu_backward_hd256

$(BUILD)/test_gpu_decode: tests/test_gpu_decode.cu tests/reference.h tests/test_util.h flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) $< -o $@

# Full suites one after another, then the --quick size lists under memcheck,
# racecheck and synccheck, all nine sanitizer runs at once (they are bound by
# the host CPU, not the GPU). SAN_SHARDS=n splits each of test_gpu's three
# (and only those: the other programs run whole) into n runs side by side, run k taking the cases k modulo n
# (FA_TEST_SHARD=k/n, tests/shard.h), for a host with the cores. Logs:
# $(BUILD)/sanitize-<program>-<tool>-<k>.log. GPU_SHARDS=n does the same for
# the full suites: every program at once, test_gpu, test_gpu_decode and
# test_gpu_backward (whose fp64 references take the time) in n runs each (logs
# $(BUILD)/test-<program>-<k>.log; each run's summary line is printed).
# Beside them from the start (CPU only; minutes for a large program), tests/check_sass.py on
# each program's SASS ($(BUILD)/sass-<program>.txt, its report sass-<program>.log):
# no cp.async may read a uniform register that nothing writes (a ptxas 13.0
# miscompile seen in trial builds; flashattn_cuda.cuh, >>decode-prims).
# Parts can be left out where one go does not fit (bench/device_run_forward.sh
# PART=1 / 2): SANITIZERS= leaves out the sanitizer runs, GPU_TEST_RUN=no the
# full runs and the SASS checks.
GPU_TEST_PROGS := test_gpu test_gpu_decode test_gpu_backward
SANITIZERS     := memcheck racecheck synccheck
SAN_SHARDS     := 1
GPU_SHARDS     := 1
GPU_TEST_RUN   := yes
test-gpu: $(addprefix $(BUILD)/,$(GPU_TEST_PROGS))
	@set -e; f=0; n=0; \
	if [ "$(GPU_TEST_RUN)" != no ]; then for p in $(GPU_TEST_PROGS); do \
	  ( set +e; { $(CUOBJDUMP) -sass $(BUILD)/$$p > $(BUILD)/sass-$$p.txt && python3 tests/check_sass.py $(BUILD)/sass-$$p.txt; } \
	      > $(BUILD)/sass-$$p.log 2>&1; echo $$? > $(BUILD)/sass-$$p.rc ) & \
	done; fi; \
	if [ "$(GPU_TEST_RUN)" != no ] && [ $(GPU_SHARDS) -le 1 ]; then \
	  for p in $(GPU_TEST_PROGS); do n=$$((n+1)); $(BUILD)/$$p || f=$$((f+1)); done; fi; \
	if [ "$(GPU_TEST_RUN)" != no ] && [ $(GPU_SHARDS) -gt 1 ]; then \
	  runs() { case $$1 in test_gpu|test_gpu_backward|test_gpu_decode) echo $(GPU_SHARDS);; *) echo 1;; esac; }; \
	  for p in $(GPU_TEST_PROGS); do r=$$(runs $$p); for k in $$(seq 0 $$((r - 1))); do \
	    ( set +e; FA_TEST_SHARD=$$k/$$r $(BUILD)/$$p > $(BUILD)/test-$$p-$$k.log 2>&1; echo $$? > $(BUILD)/test-$$p-$$k.rc ) & \
	  done; done; wait; \
	  for p in $(GPU_TEST_PROGS); do r=$$(runs $$p); for k in $$(seq 0 $$((r - 1))); do \
	    n=$$((n+1)); echo "== $$p (run $$k of $$r): exit $$(cat $(BUILD)/test-$$p-$$k.rc)"; \
	    grep -E "^FAIL|ran on the sm_90a|^[0-9]+ passed, [0-9]+ failed" $(BUILD)/test-$$p-$$k.log || true; \
	    [ "$$(cat $(BUILD)/test-$$p-$$k.rc)" = 0 ] || f=$$((f+1)); \
	  done; done; fi; \
	shards() { if [ $$1 = test_gpu ]; then seq 0 $$(($(SAN_SHARDS) - 1)); else echo 0; fi; }; \
	for p in $(GPU_TEST_PROGS); do for t in $(SANITIZERS); do for k in $$(shards $$p); do \
	  ns=1; [ $$p = test_gpu ] && ns=$(SAN_SHARDS); \
	  ( set +e; FA_TEST_SHARD=$$k/$$ns $(SANITIZER) --tool $$t --error-exitcode 3 $(BUILD)/$$p --quick \
	      > $(BUILD)/sanitize-$$p-$$t-$$k.log 2>&1; echo $$? > $(BUILD)/sanitize-$$p-$$t-$$k.rc ) & \
	done; done; done; wait; \
	for p in $(GPU_TEST_PROGS); do for t in $(SANITIZERS); do for k in $$(shards $$p); do \
	  n=$$((n+1)); echo "== compute-sanitizer --tool $$t $$p --quick (shard $$k): exit $$(cat $(BUILD)/sanitize-$$p-$$t-$$k.rc)"; \
	  grep -E "passed, .* failed|SUMMARY" $(BUILD)/sanitize-$$p-$$t-$$k.log || true; \
	  [ "$$(cat $(BUILD)/sanitize-$$p-$$t-$$k.rc)" = 0 ] || f=$$((f+1)); \
	done; done; done; \
	wait; if [ "$(GPU_TEST_RUN)" != no ]; then for p in $(GPU_TEST_PROGS); do n=$$((n+1)); \
	  echo "== sass-check $$p (tests/check_sass.py): exit $$(cat $(BUILD)/sass-$$p.rc)"; cat $(BUILD)/sass-$$p.log; \
	  [ "$$(cat $(BUILD)/sass-$$p.rc)" = 0 ] || f=$$((f+1)); \
	done; fi; \
	echo "test-gpu: $$((n-f)) passed, $$f failed (each test program, each under the sanitizers, and its SASS check)"; \
	test $$f -eq 0

# FP8 (issue 49): fa_quantize_cuda bit for bit against the CPU fa_quantize
# (test-gpu runs it with the others, sanitizers included), and its bandwidth
# beside a cudaMemcpy: make bench-fp8-quant (on the GPU machine).
GPU_TEST_PROGS += test_gpu_fp8
GPU_SOURCES    += tests/test_gpu_fp8.cu
test-gpu: $(BUILD)/test_gpu_fp8
# (the default head dims: the attention cases run d 64, 128 and 256 as users build them)
$(BUILD)/test_gpu_fp8: tests/test_gpu_fp8.cu tests/fp8_attn.h tests/reference.h tests/test_util.h tests/cuda_check.h \
                       flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) $< -o $@
# Where the FP8 attention tolerances (tests/fp8_attn.h) come from: the same cases through a
# simulated FP8 kernel, and through broken ones that must fail (CPU only; --quick: seconds,
# the full list: about 10 minutes on a 2-core machine). make fp8-calibrate [FP8_CAL_FLAGS=--quick]
FP8_CAL_FLAGS ?=
$(BUILD)/fp8_calibrate: tests/fp8_calibrate.c tests/fp8_attn.h $(TEST_DEPS) | $(BUILD)
	$(CC) -std=c99 $(TEST_CFLAGS) $(OPT) -o $@ tests/fp8_calibrate.c -lm
.PHONY: fp8-calibrate
fp8-calibrate: $(BUILD)/fp8_calibrate
	$(BUILD)/fp8_calibrate $(FP8_CAL_FLAGS)
$(BUILD)/bench_fp8_quant: bench/bench_fp8_quant.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -DFLASHATTN_HEAD_DIMS=64 $(call gencode,$(GPU_ARCHS)) $< -o $@
.PHONY: bench-fp8-quant
bench-fp8-quant: $(BUILD)/bench_fp8_quant
	$(BUILD)/bench_fp8_quant | tee bench/results/fp8-quant-latest.md

# One compile per (source, architecture): PASS/FAIL lines, counts in
# build/gpu-compile.counts as "passed failed".
# The benchmark programs are checked with d 64's kernels alone (their own code
# is host code, and the test programs compile every head dim's kernels): a
# third of their compile time. bench/micro sets its head dims itself.
gpu_check_defs = $(if $(filter bench/micro/%,$(1)),,$(if $(filter $(GPU_BENCH_SOURCES),$(1)),-DFLASHATTN_HEAD_DIMS=64))
define GPU_COMPILE_RULE
$(BUILD)/gpu-compile/$(2)/$(basename $(notdir $(1))).ok: $(1) flashattn.h flashattn_cuda.cuh $(wildcard tests/*.h)
	@mkdir -p $$(@D)
	@if $(NVCC) $(NVCC_FLAGS) $(NVCC_WERROR) -I. $(call gpu_check_defs,$(1)) $(call gencode,$(2)) -c $(1) -o $$(@:.ok=.o) > $$(@:.ok=.log) 2>&1 \
	   && [ ! -s $$(@:.ok=.log) ]; then echo "PASS gpu-compile sm_$(2) $(1)" > $$@; \
	 else echo "FAIL gpu-compile sm_$(2) $(1) (see $$(@:.ok=.log))" > $$@; fi
endef
$(foreach a,$(GPU_ARCHS_ALL),$(foreach s,$(GPU_SOURCES),$(eval $(call GPU_COMPILE_RULE,$(s),$(a)))))
gpu_compile_oks = $(foreach a,$(1),$(foreach s,$(GPU_SOURCES),$(BUILD)/gpu-compile/$(a)/$(basename $(notdir $(s))).ok))

# Every GPU source for sm_90a, the device the tests and benchmarks run on; for
# the other default architectures the example alone. All device code is the
# header's (no test or benchmark source has any), and each translation unit
# compiles every kernel of it: 1.5-3 minutes of CPU per unit and architecture
# on a 2-core machine (2026-11-25, when `make test` took 15.7 minutes with the
# tests compiled for sm_80 too). One unit per architecture checks the header's
# code for it; the example is the configuration a user compiles.
gpu_arch_sources = $(if $(filter 90a,$(1)),$(GPU_SOURCES),examples/gpu_simple.cu)
gpu_check_oks = $(foreach a,$(1),$(foreach s,$(call gpu_arch_sources,$(a)),$(BUILD)/gpu-compile/$(a)/$(basename $(notdir $(s))).ok))

# The sm_90a forward's ablation builds (bench/results/LOG.md, "How the sm_90a
# forward got there"), so that the code behind its macros keeps compiling
# cleanly: tma (TMA + wgmma alone) and nows (all but warp specialization),
# d 64 only, sm_90a.
ABLATION_tma  := -DFA__SM90_WARPSPEC=0 -DFA__SM90_PINGPONG=0 -DFA__SM90_OVERLAP=0 -DFA__SM90_PERSISTENT=0
ABLATION_nows := -DFA__SM90_WARPSPEC=0
define ABLATION_RULE
$(BUILD)/gpu-compile/ablation/$(1).ok: bench/fa_bench_lib.cu flashattn.h flashattn_cuda.cuh
	@mkdir -p $$(@D)
	@if $(NVCC) $(NVCC_FLAGS) $(NVCC_WERROR) -I. -DFLASHATTN_HEAD_DIMS=64 $(ABLATION_$(1)) $(call gencode,90a) \
	     -c $$< -o $$(@:.ok=.o) > $$(@:.ok=.log) 2>&1 && [ ! -s $$(@:.ok=.log) ]; \
	 then echo "PASS gpu-compile sm_90a ablation $(1) ($(ABLATION_$(1)))" > $$@; \
	 else echo "FAIL gpu-compile sm_90a ablation $(1) (see $$(@:.ok=.log))" > $$@; fi
endef
$(foreach v,tma nows,$(eval $(call ABLATION_RULE,$(v))))

# The clock() traces of the sm_90a forward and backward (bench/sm90_trace/trace.cu,
# trace_bwd.cu define FLASHATTN_TRACE before the header): compiled for sm_90a, d 64's
# kernels alone (one template for every head dim; the test programs compile them all).
$(BUILD)/gpu-compile/ablation/sm90_%.ok: bench/sm90_trace/%.cu flashattn.h flashattn_cuda.cuh
	@mkdir -p $(@D)
	@if $(NVCC) $(NVCC_FLAGS) -I. -DFLASHATTN_HEAD_DIMS=64 $(call gencode,90a) -c $< -o $(@:.ok=.o) > $(@:.ok=.log) 2>&1; \
	 then echo "PASS gpu-compile sm_90a $<" > $@; \
	 else echo "FAIL gpu-compile sm_90a $< (see $(@:.ok=.log))" > $@; fi
ablation_oks = $(if $(filter 90a,$(1)),$(addprefix $(BUILD)/gpu-compile/ablation/,tma.ok nows.ok sm90_trace.ok sm90_trace_bwd.ok))

test-gpu-compile: $(call gpu_check_oks,$(GPU_ARCHS)) $(call ablation_oks,$(GPU_ARCHS))
	@cat $^; p=$$(cat $^ | grep -c '^PASS' || true); f=$$(cat $^ | grep -c '^FAIL' || true); \
	for x in $^; do grep -q '^FAIL' $$x && cat $${x%.ok}.log | head -20; done; \
	echo "$$p $$f" > $(BUILD)/gpu-compile.counts; echo "gpu-compile: $$p passed, $$f failed"

build-all: $(call gpu_compile_oks,$(GPU_ARCHS_ALL))
	@cat $^; p=$$(cat $^ | grep -c '^PASS' || true); f=$$(cat $^ | grep -c '^FAIL' || true); \
	echo "$$p $$f" > $(BUILD)/gpu-compile.counts; echo "gpu-compile (sm_80, 86, 89, 90a): $$p passed, $$f failed"

# Benchmark: our kernel alone (bench_gpu) and beside PyTorch SDPA (vs_torch.py,
# through a shared library). Results go to build/bench/, or with RECORD=1 to
# bench/results/ (the lab's record, see bench/results/LOG.md).
BENCH_RESULTS := $(if $(RECORD),bench/results,$(BUILD)/bench)
$(BUILD)/bench_gpu: bench/bench_gpu.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) $< -o $@

$(BUILD)/libfa_bench.so: bench/fa_bench_lib.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -shared -Xcompiler -fPIC $< -o $@

$(BUILD)/libfa_bench_decode.so: bench/fa_bench_decode_lib.cu flashattn.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -shared -Xcompiler -fPIC $< -o $@

.PHONY: bench-gpu-decode
bench-gpu-decode: $(BUILD)/libfa_bench_decode.so
	@mkdir -p $(BENCH_RESULTS)
	python3 bench/vs_torch.py decode --lib $< --out $(BENCH_RESULTS)

bench-gpu: $(BUILD)/bench_gpu $(BUILD)/libfa_bench.so $(BUILD)/libfa_bench_decode.so
	@mkdir -p $(BENCH_RESULTS)
	$(BUILD)/bench_gpu
	python3 bench/vs_torch.py --lib $(BUILD)/libfa_bench.so --out $(BENCH_RESULTS)
	python3 bench/vs_torch.py decode --lib $(BUILD)/libfa_bench_decode.so --out $(BENCH_RESULTS)
	python3 bench/vs_torch_backward.py --lib $(BUILD)/libfa_bench.so | tee $(BENCH_RESULTS)/backward-latest.txt

# The block-sparse forward and backward (issue 51) beside FlexAttention with the same BlockMask,
# our dense kernels and SDPA cuDNN: bench/vs_flex_sparse.py, one run per direction, the forward
# first (<date>_<device>_sparse-fwd.md, then --backward: ..._sparse-bwd.md). SPARSE_FLAGS (both
# runs): "--quick" for a subset, "--deterministic" (the backward), ... (its --help).
# bench-sparse-fwd / bench-sparse-bwd: one direction alone.
SPARSE_FLAGS ?=
SPARSE_RUN    = python3 bench/vs_flex_sparse.py --lib $(BUILD)/libfa_bench.so --out $(BENCH_RESULTS) $(SPARSE_FLAGS)
bench-sparse: $(BUILD)/libfa_bench.so
	@mkdir -p $(BENCH_RESULTS)
	$(SPARSE_RUN)
	$(SPARSE_RUN) --backward
bench-sparse-fwd: $(BUILD)/libfa_bench.so
	@mkdir -p $(BENCH_RESULTS)
	$(SPARSE_RUN)
bench-sparse-bwd: $(BUILD)/libfa_bench.so
	@mkdir -p $(BENCH_RESULTS)
	$(SPARSE_RUN) --backward


# ---- NEON (AArch64) path, cross compiled and run under qemu ------------------
# An x86 machine tests the NEON path by compiling the tests for AArch64 and
# running them under qemu's user-mode emulator; on Debian or Ubuntu:
#     sudo apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user
#   neon-compile  the tests and the header as C++11 compiled for AArch64 (no
#                 linking, no running); part of `make test` when possible
#   test-neon     test_cpu and test_bad_input built -static for AArch64 (NEON
#                 loops, and once more with FLASHATTN_NO_SIMD) and run under
#                 qemu; says "skipped" and why when a tool is missing. qemu
#                 translates every instruction: its timings mean nothing.
# A static link with OpenMP makes ld warn that libgomp's dlopen needs the
# shared glibc at run time: the tests never reach that code.
AARCH64_CC   ?= $(shell command -v aarch64-linux-gnu-gcc 2>/dev/null)
AARCH64_CXX  ?= $(shell command -v aarch64-linux-gnu-g++ 2>/dev/null)
QEMU_AARCH64 ?= $(shell command -v qemu-aarch64 2>/dev/null || command -v qemu-aarch64-static 2>/dev/null)
NEON_BUILD   := $(BUILD)/neon
NEON_CFLAGS  := -std=c99 $(WARN) -O2

# Why the NEON checks cannot run here, or nothing. $(1) = qemu: it is needed too.
# (A cross gcc installed without libc6-dev-arm64-cross has no <stdlib.h>; a
# compiler for another target has no <arm_neon.h>.)
neon_missing = if [ -z "$(AARCH64_CC)" ]; then echo "no aarch64 cross compiler"; \
  elif ! $(AARCH64_CC) -fsyntax-only -include stdlib.h -include arm_neon.h -x c /dev/null > /dev/null 2>&1; then \
    echo "$(AARCH64_CC) finds no AArch64 C library or arm_neon.h"; \
  elif [ "$(1)" = qemu ] && [ -z "$(QEMU_AARCH64)" ]; then echo "no qemu-aarch64"; fi

$(NEON_BUILD) $(NEON_BUILD)/results:
	mkdir -p $@

NEON_OBJS := $(NEON_BUILD)/test_cpu.o $(NEON_BUILD)/test_bad_input.o $(if $(AARCH64_CXX),$(NEON_BUILD)/compile_static_cxx11.o)
$(NEON_BUILD)/%.o: tests/%.c $(TEST_DEPS) | $(NEON_BUILD)
	$(AARCH64_CC) $(NEON_CFLAGS) $(OPENMP) -c -o $@ $<
$(NEON_BUILD)/compile_static_cxx11.o: tests/compile_static.c tests/compile_use.c flashattn.h | $(NEON_BUILD)
	$(AARCH64_CXX) -x c++ -std=c++11 $(WARN) -O2 -c -o $@ $<
.PHONY: neon-compile
neon-compile: $(NEON_OBJS)
	@$(AARCH64_CC) -dM -E -DFLASHATTN_IMPLEMENTATION -x c flashattn.h | grep -q 'define FLASHATTN__NEON 1' \
	  || { echo "$(AARCH64_CC) does not select the NEON path (FLASHATTN__NEON is not 1)"; exit 1; }

# <test>_simd: the NEON loops; <test>_nosimd: FLASHATTN_NO_SIMD, the portable
# loops (test_cpu_nosimd with the quick sizes: at full size it would add
# half an hour of emulation for loops that test-cpu already runs natively).
$(NEON_BUILD)/%_simd: tests/%.c $(TEST_DEPS) | $(NEON_BUILD)
	$(AARCH64_CC) $(NEON_CFLAGS) $(OPENMP) -static -o $@ $< -lm -lpthread
$(NEON_BUILD)/%_nosimd: tests/%.c $(TEST_DEPS) | $(NEON_BUILD)
	$(AARCH64_CC) $(NEON_CFLAGS) $(OPENMP) -DFLASHATTN_NO_SIMD -static -o $@ $< -lm -lpthread
$(NEON_BUILD)/results/%.txt: $(NEON_BUILD)/% FORCE | $(NEON_BUILD)/results
	@$(RUN_CHECK) $@ "$* (AArch64, qemu)" env $(if $(filter test_cpu_nosimd,$*),FA_TEST_QUICK=1) $(QEMU_AARCH64) $<

NEON_RESULTS := $(foreach t,test_cpu test_bad_input,$(foreach v,simd nosimd,$(NEON_BUILD)/results/$(t)_$(v).txt))
# (kept: as intermediates of the pattern rules make would delete them, and
# the next run would link all four again)
.SECONDARY: $(patsubst $(NEON_BUILD)/results/%.txt,$(NEON_BUILD)/%,$(NEON_RESULTS))
.PHONY: neon-run
neon-run: $(NEON_RESULTS)
	@$(call sum_results,$^)
test-neon:
	@why=$$($(call neon_missing,qemu)); if [ -n "$$why" ]; then \
	  echo "test-neon: skipped ($$why; see the Makefile's NEON section)"; echo "0 passed, 0 failed"; \
	else $(MAKE) --no-print-directory neon-run; fi


# ---- examples and demo --------------------------------------------------------
# `make run` builds and runs the demo; `make examples` builds every CPU example
# (each also compiles alone with the command in its header comment);
# `make examples-check` runs the ones that check themselves; `make examples-gpu`
# compiles the GPU example with nvcc (needs flashattn_cuda.cuh).
EXAMPLES_CPU  := cpu_simple online_softmax decode_paged block_sparse fp8 backward demo
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

examples-check: $(BUILD)/examples/cpu_simple $(BUILD)/examples/online_softmax $(BUILD)/examples/decode_paged \
                $(BUILD)/examples/block_sparse $(BUILD)/examples/fp8 $(BUILD)/examples/backward
	./$(BUILD)/examples/cpu_simple > /dev/null
	./$(BUILD)/examples/online_softmax > /dev/null
	./$(BUILD)/examples/decode_paged > /dev/null
	./$(BUILD)/examples/block_sparse > /dev/null
	./$(BUILD)/examples/fp8 > /dev/null
	./$(BUILD)/examples/backward > /dev/null
	@echo "examples-check: ok"

examples-gpu: $(BUILD)/examples/gpu_simple

$(BUILD)/examples/gpu_simple: examples/gpu_simple.cu flashattn.h flashattn_cuda.cuh | $(BUILD)/examples
	$(NVCC) -O2 -I. $(NVCC_GENCODE) $< -o $@

# ---- CPU benchmark ------------------------------------------------------------
# `make bench` prints a markdown report and saves it as
# build/bench/cpu-<UTC date>-<host kind>.md, or with RECORD=1 under
# bench/results/ (HOST_KIND: CPU model and logical CPU count, e.g.
# amd-epyc-2t; override on the command line).
# BENCH_ISA=avx2: the AVX2 + FMA loops (no AVX-512) on an AVX-512 machine too.
BENCH_ISA    ?= native
BENCH_CFLAGS := -O3 $(if $(filter avx2,$(BENCH_ISA)),$(AVX2_FLAGS) -mf16c,-march=native) -fopenmp
HOST_KIND    ?= $(shell grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$$//' | cut -c1-40)-$(JOBS)t
# (the time of day in the name: a second run the same day keeps the first;
# one date call, so a run across midnight names one moment)
BENCH_WHEN   := $(shell date -u +%Y-%m-%d_%H%M)
BENCH_DATE   := $(word 1,$(subst _, ,$(BENCH_WHEN)))
BENCH_HM     := $(word 2,$(subst _, ,$(BENCH_WHEN)))
BENCH_OUT    := $(BENCH_RESULTS)/cpu-$(BENCH_DATE)-$(HOST_KIND)$(if $(filter avx2,$(BENCH_ISA)),-avx2)-$(BENCH_HM).md

$(BUILD)/bench_cpu: bench/bench_cpu.c flashattn.h FORCE | $(BUILD)
	$(CC) $(BENCH_CFLAGS) -Wall -Wextra -DBENCH_FLAGS='"$(BENCH_CFLAGS)"' -I. $< -lm -o $@

# FlashAttention-3's Table 3 method on the CPU twin of the FP8 path (issue 49):
# make bench-fp8-accuracy [FP8_ACC_FLAGS="--seqlen 1024"] (see the file's header).
FP8_ACC_FLAGS ?=
FP8_ACC_DEPS  := bench/fp8_accuracy.h tests/test_util.h tests/reference.h flashattn.h
$(BUILD)/fp8_accuracy: bench/fp8_accuracy.c $(FP8_ACC_DEPS) | $(BUILD)
	$(CC) -std=c99 $(BENCH_CFLAGS) -Wall -Wextra -I. $< -lm -o $@
.PHONY: bench-fp8-accuracy
bench-fp8-accuracy: $(BUILD)/fp8_accuracy
	./$(BUILD)/fp8_accuracy $(FP8_ACC_FLAGS)
# ... and the same table on the GPU (fa_quantize_cuda + fa_forward_cuda; a GPU machine):
# make bench-fp8-accuracy-gpu [FP8_ACC_FLAGS=...]. Not part of make test.
$(BUILD)/fp8_accuracy_gpu: bench/fp8_accuracy_gpu.cu $(FP8_ACC_DEPS) tests/cuda_check.h flashattn_cuda.cuh | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(call gencode,$(GPU_ARCHS)) -I. $< -o $@
.PHONY: bench-fp8-accuracy-gpu
bench-fp8-accuracy-gpu: $(BUILD)/fp8_accuracy_gpu
	./$(BUILD)/fp8_accuracy_gpu $(FP8_ACC_FLAGS)

bench: $(BUILD)/bench_cpu
	@mkdir -p $(BENCH_RESULTS)
	./$(BUILD)/bench_cpu | tee $(BENCH_OUT).tmp
	mv $(BENCH_OUT).tmp $(BENCH_OUT)
	@echo "saved $(BENCH_OUT)"

# `make bench-peers`: flashattn's forward beside ggml's ggml_flash_attn_ext in
# one run (bench/peers/README.md). ggml is built once OUTSIDE the repository;
# nothing is fetched here. GGML_SRC: its source tree (include/), GGML_BUILD:
# its CMake build (static libraries); PEER_FLAGS must match the ISA ggml was
# built for (default: AVX2 + FMA + F16C, no AVX-512). PEER_THREADS: 2.
GGML_SRC     ?= /work/ggml-src
GGML_BUILD   ?= /work/ggml-build/avx2
PEER_FLAGS   ?= -O3 -mavx2 -mfma -mf16c -mno-avx512f -fopenmp
PEER_THREADS ?= 2
GGML_LIBS     = $(GGML_BUILD)/src/libggml.a $(GGML_BUILD)/src/libggml-cpu.a $(GGML_BUILD)/src/libggml-base.a
.PHONY: bench-peers
$(BUILD)/bench_ggml: bench/peers/ggml_fa.c flashattn.h $(GGML_LIBS) | $(BUILD)
	$(CC) $(PEER_FLAGS) -Wall -Wextra -I. -I$(GGML_SRC)/include $< $(GGML_LIBS) -lstdc++ -lm -lpthread -o $@
bench-peers: $(BUILD)/bench_ggml
	@mkdir -p bench/results
	./$(BUILD)/bench_ggml $(PEER_THREADS) | tee bench/results/peers-$(BENCH_DATE)-$(HOST_KIND)-$(BENCH_HM).md
