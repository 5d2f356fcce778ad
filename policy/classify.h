/*
 * Where a communicator is classified: the caller's API family, the process's
 * role, and the communicator's purpose.  Pure functions of their inputs.
 */
#ifndef NCCLSHIM_POLICY_CLASSIFY_H
#define NCCLSHIM_POLICY_CLASSIFY_H

#include "evidence.h"

/* The API family of the library at `path` (the caller of NCCL). */
enum api_family classify_api(const char *path);

/*
 * The role of this process, first rule that applies:
 *   1. NCCLSHIM_ROLE (training|inference|unknown; anything else is reported in reason
 *      and ignored);
 *   2. a loaded library matching inference_libs          -> inference;
 *   3. the process title matching inference_titles       -> inference;
 *   4. the process title matching training_titles        -> training;
 *   5. otherwise unknown.
 * `libs` is a NULL-terminated list of loaded object paths (may be NULL).
 */
struct verdict classify_role(const struct policy_patterns *pp, const char *title,
                             const char *const *libs);

/*
 * The purpose of a communicator from one process's evidence alone (decisions
 * that see all ranks come later and overrule this):
 *   1. a Python frame matching weight_update_callsites   -> weight-update;
 *   2. created by torch: inference process -> inference, else training;
 *   3. another API in a training process                 -> weight-update
 *      (trainers do their own collectives through torch; a second NCCL client
 *      in a trainer is how NeMo-RL and vLLM ship weights);
 *   4. another API in an inference process               -> inference;
 *   5. otherwise unknown.
 */
struct verdict classify_purpose(const struct policy_patterns *pp, const struct local_evidence *ev);

#endif
