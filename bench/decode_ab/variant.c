/* One copy of the header under test, compiled with internal linkage
   (FLASHATTN_STATIC) so that two copies can live in one program; the
   including build names the copy with -DFA_AB_NAME=old or new and points
   -I at its header. See decode_ab.sh. */
#define FLASHATTN_STATIC
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#define FA_AB_CAT2(a, b) a##b
#define FA_AB_CAT(a, b) FA_AB_CAT2(a, b)

int FA_AB_CAT(decode_, FA_AB_NAME)(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v, fa_tensor o, void *ws,
                                  size_t ws_bytes);
size_t FA_AB_CAT(workspace_, FA_AB_NAME)(const fa_problem *p);

int FA_AB_CAT(decode_, FA_AB_NAME)(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v, fa_tensor o, void *ws,
                                  size_t ws_bytes)
{
    fa_tensor none;
    memset(&none, 0, sizeof none);
    return (int)fa_decode(p, q, k, v, none, none, o, NULL, ws, ws_bytes);
}

size_t FA_AB_CAT(workspace_, FA_AB_NAME)(const fa_problem *p)
{
    size_t bytes = 0;
    fa_decode_workspace_size(p, &bytes);
    return bytes;
}
