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
 *   2. the process title matching inference_titles or training_titles: where
 *      both match, the pattern with more literal characters wins, a tie goes
 *      to inference;
 *   3. a loaded library matching inference_libs          -> inference (a
 *      title that names a role wins over it: trainers import vLLM and SGLang);
 *   4. otherwise unknown.
 * `libs` is a NULL-terminated list of loaded object paths (may be NULL).
 */
struct verdict classify_role(const struct policy_patterns *pp, const char *title,
                             const char *const *libs);

/* Whether `value` (NCCLSHIM_ROLE) names a role: training, inference or unknown, any case. */
int classify_role_setting_valid(const char *value);

/*
 * Whether this rank is an inference engine's worker, by who set the evidence:
 * the title matching engine_titles (ENGINE_TITLE), a Python frame of this
 * creation matching engine_frames (ENGINE_FRAMES, frame = its index), both
 * strong; a loaded library matching inference_libs (ENGINE_LIB), weak.  `role`
 * is the rank's role (classify_rank_role): ENGINE_ROLE_BY_LIB is set where it
 * is inference by a loaded library alone (no NCCLSHIM_ROLE, no title rule).
 */
struct engine_verdict classify_engine(const struct policy_patterns *pp, const char *title, int nframes,
                                      const char (*frames)[EVIDENCE_FRAME_LEN], const char *const *libs,
                                      struct verdict role);

/*
 * The role of this rank for one communicator: the process's `role`, unless a
 * Python frame of this creation matches trainer_callsites (this rank is the
 * trainer, the sender: vLLM's weight-transfer API runs its trainer in any
 * process, vLLM imported), which makes it training.  NCCLSHIM_ROLE, when set
 * to a valid role, is never overridden.
 */
struct verdict classify_rank_role(const struct policy_patterns *pp, struct verdict role, int nframes,
                                  const char (*frames)[EVIDENCE_FRAME_LEN]);

/*
 * Whether the creator needs NCCL's whole API on this communicator (windows,
 * the device API, split): a Python frame of this creation or a loaded library
 * matching full_api (NeMo-RL's nccl_reshard, vLLM's m2n engine).  value 1
 * with the reason, else 0.
 */
struct verdict classify_full_api(const struct policy_patterns *pp, int nframes,
                                 const char (*frames)[EVIDENCE_FRAME_LEN], const char *const *libs);

/*
 * A Python frame of this creation at a weight-update call site
 * (weight_update_callsites): value 1 with the frame and pattern, else 0.
 */
struct verdict classify_callsite(const struct policy_patterns *pp, int nframes,
                                 const char (*frames)[EVIDENCE_FRAME_LEN]);

/*
 * A unique ID made inside torch (its process groups make theirs lazily, at
 * the first collective): whether it gets the rendezvous mark like a
 * binding's.  Yes where this thread's Python frames or the process title show
 * weight-update evidence (weight_update_callsites); where the process carries
 * any engine evidence (`engine`, classify_engine's bits: a trainer that
 * imports an engine may make the weight-update group's ID under names no
 * pattern knows, and an engine's own groups are not training's); and where
 * NCCLSHIM_ROLE=training (the user said this process trains beside an engine).
 * value 1 with the reason; else 0 and why not.  The training groups of a
 * process with none of these stay unmarked: no rendezvous, no latency.
 */
struct verdict classify_torch_id(const struct policy_patterns *pp, const char *title, int nframes,
                                 const char (*frames)[EVIDENCE_FRAME_LEN], int engine);

/*
 * The purpose of a communicator from one process's evidence alone (decisions
 * that see all ranks come later and overrule this):
 *   1. a Python frame matching weight_update_callsites   -> weight-update;
 *   2. created by torch: inference process -> inference, else training (a
 *      process that is inference by a loaded engine library alone, with no
 *      engine title or frame, is a trainer that imports the engine: training);
 *   3. another API in a training process                 -> weight-update
 *      (trainers do their own collectives through torch; a second NCCL client
 *      in a trainer is how NeMo-RL and vLLM ship weights);
 *   4. another API in an inference process               -> inference;
 *   5. otherwise unknown.
 */
struct verdict classify_purpose(const struct policy_patterns *pp, const struct local_evidence *ev);

#endif
