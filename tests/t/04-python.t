#!/bin/bash
# Interposition from Python: a ctypes client written like vLLM's pynccl and one
# that looks names up like nccl4py; records carry the API family, the Python
# call site, the process title and role, and the purpose that follows.
. "$(dirname "$0")/../tap.sh"
skip_emulated "the host's python3 cannot load the aarch64 library and fakes (ctypes); t/02, t/03 and t/13 run the same interposition from C"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || skip_all "no python3"
A=$FAKE/a/libnccl.so.2

runpy() { # runpy <name> <env...> -- <args>
    local name=$1; shift
    mkdir -p "$TMP/$name"
    env FAKE_NCCL_LOG="$TMP/$name/fake.log" NCCLSHIM_LOG_DIR="$TMP/$name/rec" LD_PRELOAD="$SHIM" "$@" \
        > "$TMP/$name/out" 2> "$TMP/$name/err"
    echo $? > "$TMP/$name/rc"
}

runpy vllm timeout -k 5 "$(tap_scale 60)" "$PY" "$ROOT/tests/clients/pynccl_like.py" "$A"
is "$(cat "$TMP/vllm/rc")" 0 "the vLLM-style ctypes client passes under the shim"
import_checks "$TMP/vllm/out"
rec=$TMP/vllm/rec
unlike "$(cat "$TMP/vllm/fake.log")" 'INVALID-COMM' "no shim handle reached NCCL"
c='select(.type=="comm")'
is "$(jqr "$rec" "$c | .caller.api")" '"ctypes"' "API family: ctypes (the caller is libffi/_ctypes)"
like "$(jqr "$rec" "$c | .python[0]")" 'pynccl_like\.py:[0-9]+ init_collective' "innermost Python frame: file:line function"
like "$(jqr "$rec" "$c | .python | join(\"|\")")" 'main\|.*<module>' "outer frames up to the module"
like "$(jqr "$rec" "$c | .title")" 'pynccl_like\.py' "process title recorded"
is "$(jqr "$rec" "$c | .purpose")" '"weight-update"' "an init_collective call site makes it a weight-update communicator"
like "$(jqr "$rec" "$c | .purpose_reason")" 'init_collective' "and the reason names the frame"
is "$(jqr "$rec" 'select(.type=="unique_id") | .caller.api')" '"ctypes"' "unique ID record: API family"
is "$(jqr "$rec" 'select(.type=="comm_end") | .ops')" '{"AllReduce":{"count":1,"bytes":16},"Broadcast":{"count":2,"bytes":32}}' "traffic recorded at destroy"

# A Ray-named vLLM actor process: the title gives the role.
# Ray renames actor processes (setproctitle); exec -a gives the same /proc/self/cmdline.
PYBIN=$("$PY" -c 'import sys; print(sys.executable)')
runpy ray timeout -k 5 "$(tap_scale 60)" bash -c 'exec -a "ray::VllmGenerationWorker" "$0" "$@"' "$PYBIN" "$ROOT/tests/clients/pynccl_like.py" "$A"
is "$(cat "$TMP/ray/rc")" 0 "client passes under a Ray actor title"
is "$(jqr "$TMP/ray/rec" "$c | [.role, .title]")" '["inference","ray::VllmGenerationWorker '"$ROOT"'/tests/clients/pynccl_like.py '"$A"'"]' "role inference from the process title ray::VllmGenerationWorker"
like "$(jqr "$TMP/ray/rec" "$c | .role_reason")" "matches inference pattern" "role reason names the pattern"

# NCCLSHIM_ROLE overrides, and the call-site rule can be switched off.
runpy role NCCLSHIM_ROLE=training NCCLSHIM_WEIGHT_UPDATE_CALLSITES=nothing-matches timeout -k 5 "$(tap_scale 60)" "$PY" "$ROOT/tests/clients/pynccl_like.py" "$A"
is "$(jqr "$TMP/role/rec" "$c | [.role, .local_purpose]")" '["training","weight-update"]' "NCCLSHIM_ROLE=training + ctypes -> weight-update on this rank's evidence"
like "$(jqr "$TMP/role/rec" "$c | .local_purpose_reason")" 'not torch.*training process' "reason: a second NCCL client in a trainer"
is "$(jqr "$TMP/role/rec" "$c | .purpose")" '"training"' "but all ranks (the only one) train: training by consensus"

# NCCLSHIM_PYTHON_CALLSITE=0: no frames.
runpy nopy NCCLSHIM_PYTHON_CALLSITE=0 timeout -k 5 "$(tap_scale 60)" "$PY" "$ROOT/tests/clients/pynccl_like.py" "$A"
is "$(jqr "$TMP/nopy/rec" "$c | has(\"python\")")" false "NCCLSHIM_PYTHON_CALLSITE=0 records no frames"

# nccl4py-style lookups: RTLD_DEFAULT first (nothing global here), then the handle.
runpy n4py timeout -k 5 "$(tap_scale 60)" "$PY" "$ROOT/tests/clients/pynccl_like.py" "$A" --nccl4py
is "$(cat "$TMP/n4py/rc")" 0 "nccl4py-style lookups work under the shim"
import_checks "$TMP/n4py/out"
is "$(grep -c ncclCommInitRank "$TMP/n4py/fake.log")" 1 "the init reached the real library once"
done_testing
