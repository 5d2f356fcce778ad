#!/bin/bash
# The GPU-only scripts (bench/, tests/gpu/, tools/scenario/) on a box without a GPU: CI never
# runs them, so here they must at least parse, and their launchers must turn their options
# into the right launches (bench/ipc_bcast.py --dry-run: ranks, roles by title, the policy)
# and refuse bad ones.
. "$(dirname "$0")/../tap.sh"
skip_emulated "host-only: the GPU scripts' Python launchers, and no aarch64 program runs in it (make test runs it)"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || skip_all "no python3"

# Parse without writing __pycache__ into the tree.
for f in "$ROOT"/bench/*.py "$ROOT"/tests/gpu/*.py "$ROOT"/tools/scenario/*.py; do
    err=$(tap_run 30 "$PY" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" 2>&1)
    ok $? "${f#"$ROOT"/} parses${err:+: $err}"
done

B=$ROOT/bench/ipc_bcast.py
out=$(tap_run 30 "$PY" "$B" --outdir "$TMP/b" --preload "$SHIM_LIB" --shapes 1+3,2+2 --dry-run 2>&1)
ok $? "ipc_bcast.py --shapes 1+3,2+2 --dry-run exits 0"
is "$(printf '%s\n' "$out" | grep -c ': world 4, ')" 6 "6 launches of 4 ranks: ipc, ipc-staged and nccl for each shape"
like "$(printf '%s\n' "$out" | grep '^2+2 ipc:')" 'NCCLSHIM_WEIGHT_UPDATE=auto' "the shim's runs leave the choice to auto"
like "$(printf '%s\n' "$out" | grep '^2+2 nccl:')" 'preload -,' "the NCCL run has no shim"
like "$(printf '%s\n' "$out" | grep '^2+2 ipc-staged:')" 'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True' \
    "the staged run takes PyTorch's expandable segments"
is "$(ls "$TMP/b" 2>/dev/null | wc -l)" 0 "--dry-run starts nothing and writes nothing"

# The title globs classify the workers that tests/gpu/common.py starts (its command line),
# matched as the shim matches them (fnmatch, case-insensitive, a comma-separated list).
roles=$(printf '%s\n' "$out" | tap_run 30 "$PY" -c '
import fnmatch, re, sys
for line in sys.stdin:
    m = re.match(r"(\d\+\d) ipc: world (\d+), .* NCCLSHIM_INFERENCE_TITLES=(.*) NCCLSHIM_LOG_DIR=.* NCCLSHIM_TRAINING_TITLES=(.*) NCCLSHIM_WEIGHT_UPDATE", line)
    if not m:
        continue
    got = []
    for r in range(int(m.group(2))):
        title = "/usr/bin/python3 /x/bench/ipc_bcast.py --worker --rank %d --world %s --outdir /o" % (r, m.group(2))
        hit = lambda pats: any(fnmatch.fnmatchcase(title.lower(), p.lower()) for p in pats.split(","))
        got.append("I" if hit(m.group(3)) else "T" if hit(m.group(4)) else "U")
    print(m.group(1), "".join(got))
')
is "$roles" "1+3 TIII
2+2 TTII" "every worker is classified: the trainer ranks first, then the inference ranks"

for bad in 0+3 2+0 3 a+b 40+40; do
    err=$(tap_run 30 "$PY" "$B" --outdir "$TMP/b" --preload "$SHIM_LIB" --shapes "$bad" --dry-run 2>&1)
    rc=$?
    [ $rc -ne 0 ] && printf '%s' "$err" | grep -q "bad shape"
    ok $? "--shapes $bad is refused (exit $rc): ${err:0:70}"
done
err=$(tap_run 30 "$PY" "$B" --outdir "$TMP/b" --shapes 1+1 --dry-run 2>&1)
[ $? -ne 0 ] && printf '%s' "$err" | grep -q "preload SHIM is needed"
ok $? "the shim's runs without --preload are refused"
err=$(tap_run 30 "$PY" "$B" --outdir "$TMP/b" --preload "$SHIM_LIB" --runs ipc,fast --dry-run 2>&1)
[ $? -ne 0 ] && printf '%s' "$err" | grep -q "runs takes some of ipc,ipc-staged,nccl"
ok $? "an unknown run is refused"

# tests/gpu/lost_rank.py --check on a made-up run: a survivor stuck in its synchronisation fails
# the run, and the failure names the rank and the step it was stuck in.
L=$ROOT/tests/gpu/lost_rank.py
mkdir -p "$TMP/lost"
printf '%s\n' '{"ok": false, "victim": 1, "how": "kill", "errors": ["rank 0 (generation 0) still running after 60 s, stuck in torch.cuda.synchronize() after operation 5: killed"], "ranks": [{"rank": 0, "gen": 0, "returncode": -9, "result": null}, {"rank": 1, "gen": 0, "returncode": -9, "result": null}]}' > "$TMP/lost/summary.json"
out=$(tap_run 30 "$PY" "$L" --check "$TMP/lost" 2>&1)
like "$(printf '%s\n' "$out" | grep '^CHECK fail' | head -n 1)" 'rank 0 .*stuck in torch.cuda.synchronize\(\) after operation 5' \
    "lost_rank.py --check: a stuck survivor fails, named with the step it was stuck in"
like "$(printf '%s\n' "$out" | grep -c '^CHECK fail')" '^[4-9]$|^[1-9][0-9]$' "and its missing results fail too"
# lost.sh's title globs, as the shim matches them (fnmatch), on the workers' command lines.
roles=$(tap_run 30 "$PY" -c '
import fnmatch, re, sys
text = open(sys.argv[1]).read()
train = re.search(r"NCCLSHIM_TRAINING_TITLES=.([^\x27]+)", text).group(1)
infer = re.search(r"NCCLSHIM_INFERENCE_TITLES=.([^\x27]+)", text).group(1)
for r in range(4):
    title = "/usr/bin/python3 /x/tests/gpu/lost_rank.py --worker --rank %d --world 4 --outdir /o" % r
    print("I" if fnmatch.fnmatchcase(title, infer) else "T" if fnmatch.fnmatchcase(title, train) else "U", end="")
' "$ROOT/tests/gpu/lost.sh" 2>&1)
is "$roles" "TIII" "lost.sh's title globs: rank 0 training, every other rank inference"
bash -n "$ROOT/tests/gpu/lost.sh"
ok $? "tests/gpu/lost.sh parses"

S=$ROOT/tools/scenario/scenario.py
like "$(tap_run 30 "$PY" "$S" --help 2>&1)" '--inference-ranks \{1,2\}' "scenario.py takes --inference-ranks 1 or 2"
err=$(tap_run 30 "$PY" "$S" --outdir "$TMP/s" --inference-ranks 3 2>&1)
[ $? -eq 2 ] && printf '%s' "$err" | grep -q "invalid choice: 3"
ok $? "scenario.py --inference-ranks 3 is refused before anything starts"
is "$(ls "$TMP/s" 2>/dev/null | wc -l)" 0 "and nothing was written"
done_testing
