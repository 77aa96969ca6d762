/* tests/compile_static.c - FLASHATTN_STATIC: the implementation with internal
   linkage in the same translation unit as its user. */
#define FLASHATTN_STATIC
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "compile_use.c"
