"""tests/emu_common.py - what the generators of the emulated tests share (tests/emu_*.py):
the GPU header's text, and tests/emu_cuda.h's thread model (each CUDA thread a fiber,
the runtime calls on host memory) without the sm_90a part and the GPU header it includes at its end."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def cuda_header():
    """flashattn_cuda.cuh's text, to cut a section or a function out of."""
    return open(os.path.join(HERE, "..", "flashattn_cuda.cuh")).read()


def thread_model(extra):
    """emu_cuda.h up to its sm_90a part and the header, without __CUDA_ARCH__ (what follows is host code
    to the compiler), then extra: the definitions a test adds."""
    e = open(os.path.join(HERE, "emu_cuda.h")).read()
    e = e.replace("#define __CUDA_ARCH__ 900\n", "")
    hooks = "static void emu_cta_begin(void) {}\nstatic void emu_cta_end(void) {}\n"  # (no sm_90a state)
    return e[:e.index("#ifdef FA_EMU_NO_SM90")] + hooks + extra + "\n\n#endif\n"
