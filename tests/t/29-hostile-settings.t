#!/bin/bash
# Bad settings (issue 17): every warning is kept (past 32, a line counting the
# rest), printed exactly once on stderr, including under a launcher (`timeout`)
# that is under the same LD_PRELOAD, and each kept in a warning record.
. "$(dirname "$0")/../tap.sh"

# run <name> <env...>: the client under `timeout`, both with the shim preloaded.
run() {
    local d=$TMP/$1; shift
    mkdir -p "$d"
    env NCCLSHIM_LOG_DIR="$d/rec" LD_PRELOAD="$SHIM" "$@" timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked basic > "$d/out" 2> "$d/err"
    echo $? > "$d/rc"
}
warnings() { grep -c '^ncclshim: warning: ' "$1" || true; }

run one NCCLSHIM_MODE=obsrve
is "$(cat "$TMP/one/rc")" 0 "a bad setting does not harm the application"
is "$(grep -c "NCCLSHIM_MODE='obsrve'" "$TMP/one/err")" 1 "its warning is printed once, though timeout also loaded the shim"
is "$(jqr "$TMP/one/rec" 'select(.type=="warning" and .what=="bad-setting") | .message' | wc -l)" 1 "and recorded once"

# No NCCL, no warning: a process under LD_PRELOAD that never calls NCCL prints nothing.
NCCLSHIM_MODE=obsrve LD_PRELOAD=$SHIM true 2> "$TMP/true.err"
is "$(warnings "$TMP/true.err")" 0 "a process that never calls NCCL prints no setting warning"

# 20 stray names and two bad values: all 22 printed, once each.
vars=(); for i in $(seq 1 20); do vars+=("NCCLSHIM_STRAY_$i=x"); done
run twenty "${vars[@]}" NCCLSHIM_MODE=obsrve NCCLSHIM_TAG=sometimes
is "$(warnings "$TMP/twenty/err")" 22 "22 bad settings: 22 warnings (more than the 12 kept before)"
is "$(grep '^ncclshim: warning: ' "$TMP/twenty/err" | sort | uniq -d | wc -l)" 0 "none printed twice"
for i in 1 13 20; do
    is "$(grep -c "NCCLSHIM_STRAY_$i is not a setting" "$TMP/twenty/err")" 1 "NCCLSHIM_STRAY_$i reported once"
done
is "$(jqr "$TMP/twenty/rec" 'select(.type=="warning" and .what=="bad-setting") | .message' | wc -l)" 22 "22 bad-setting records"

# 50 stray names and a misspelt mode: the mode first, and a line counting what is not shown.
vars=(); for i in $(seq 1 50); do vars+=("NCCLSHIM_STRAY_$i=x"); done
run fifty "${vars[@]}" NCCLSHIM_MODE=obsrve
is "$(warnings "$TMP/fifty/err")" 32 "51 bad settings: 32 lines"
is "$(grep '^ncclshim: warning: ' "$TMP/fifty/err" | head -1 | grep -c "NCCLSHIM_MODE='obsrve'")" 1 "the bad value of a real setting comes before the stray names"
like "$(grep '^ncclshim: warning: ' "$TMP/fifty/err" | tail -1)" '^ncclshim: warning: 20 more bad NCCLSHIM_\* settings not shown \(the first 31 are\); fix these and run again to see them$' "the last line counts the 20 not shown"
is "$(jqr "$TMP/fifty/rec" 'select(.type=="warning" and .what=="bad-setting") | .message' | grep -c '20 more bad')" 1 "and the records keep it"

# A fork child that uses NCCL after its parent did prints nothing again.
mkdir -p "$TMP/fork"
NCCLSHIM_LOG_DIR=$TMP/fork/rec NCCLSHIM_MODE=obsrve LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 30)" "$BIN/fork_client" > "$TMP/fork/out" 2> "$TMP/fork/err"
is "$?" 0 "fork client passes"
is "$(grep -c "NCCLSHIM_MODE='obsrve'" "$TMP/fork/err")" 1 "parent and child: the warning printed once"
is "$(jqr "$TMP/fork/rec" 'select(.type=="warning" and .what=="bad-setting") | .pid' | sort -u | wc -l)" 2 "each process's records keep it"
done_testing
