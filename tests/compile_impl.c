/* tests/compile_impl.c - the implementation alone in its own translation unit
   (extern linkage); tests/compile_use.c calls it from another. */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
