/* The Python call site of a communicator's creation (python_callsite.c): a
 * header of its own, so that creator.c uses it and it uses nothing of creator.c. */
#ifndef NCCLSHIM_PYTHON_CALLSITE_H
#define NCCLSHIM_PYTHON_CALLSITE_H

#include "policy/evidence.h"

/* Python call site of this thread, innermost first; 0 frames if this thread
 * has no Python thread state (NCCL's own threads, plain C programs). */
int python_callsite(char frames[][EVIDENCE_FRAME_LEN], int max);

#endif
