#!/bin/bash
# Bad settings (issues 17, 46): every warning is kept (past 32, a line counting the
# rest), printed on stderr when the shim loads, in a process that never calls NCCL
# too, exactly once under a launcher (`timeout`) that is under the same LD_PRELOAD,
# each kept in a warning record, and --check fails on them.
. "$(dirname "$0")/../tap.sh"

# run <name> <env...>: the client under `timeout`, both with the shim preloaded.
run() {
    local d=$TMP/$1; shift
    mkdir -p "$d"
    env NCCLSHIM_LOG_DIR="$d/rec" LD_PRELOAD="$SHIM" "$@" timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked basic > "$d/out" 2> "$d/err"
    echo $? > "$d/rc"
}
warnings() { grep -c '^ncclshim: warning: ' "$1" || true; }
unset NCCLSHIM_WARNED # what a process that printed them leaves to its children

run one NCCLSHIM_MODE=obsrve
is "$(cat "$TMP/one/rc")" 0 "a bad setting does not harm the application"
is "$(grep -c "NCCLSHIM_MODE='obsrve'" "$TMP/one/err")" 1 "its warning is printed once, though timeout also loaded the shim"
is "$(jqr "$TMP/one/rec" 'select(.type=="warning" and .what=="bad-setting") | .message' | wc -l)" 1 "and recorded once"

# A program that never calls NCCL: the system's `true`; under emulation one built for the
# target, since the target's library cannot be preloaded into the host's programs.
TRUE=true
if [ -n "$EMULATOR" ]; then
    printf 'int main(void) { return 0; }\n' > "$TMP/noop.c"
    $TARGET_CC -o "$TMP/noop" "$TMP/noop.c" && target_wrap "$TMP/noop" && TRUE=$TMP/noop
fi

# Checked at load: a process under LD_PRELOAD that never calls NCCL prints them too,
# and writes no record file.
mkdir -p "$TMP/true"
NCCLSHIM_LOG_DIR=$TMP/true/rec NCCLSHIM_MODE=bogus NCCLSHIM_WEIGHT_UPDATE=zzz LD_PRELOAD=$SHIM env "$TRUE" 2> "$TMP/true/err"
is "$?" 0 "a process that never calls NCCL is unharmed by bad settings"
is "$(warnings "$TMP/true/err")" 2 "and prints one line for each of its two bad settings"
like "$(cat "$TMP/true/err")" "NCCLSHIM_MODE='bogus' is not one of enforce\|observe\|off; using enforce" "the mode's line"
like "$(cat "$TMP/true/err")" "NCCLSHIM_WEIGHT_UPDATE='zzz': not one of auto, ipc, socket, frugal, drop, passthrough; failing open" "the policy's line"
ok $([ ! -e "$TMP/true/rec" ] && echo 0 || echo 1) "and writes no record file"

# A chain of processes under one environment (a shell script, as pyenv's python3 is,
# that runs others; `env true`: a program, not the shell's builtin): the first
# prints, the rest stay quiet; a process whose own settings differ prints its own.
NCCLSHIM_ROLE=inferance TRUE=$TRUE LD_PRELOAD=$SHIM bash -c 'env "$TRUE"; sh -c "env \"\$TRUE\"; env env \"\$TRUE\""; NCCLSHIM_TAG=often env "$TRUE"' 2> "$TMP/chain.err"
is "$(grep -c "NCCLSHIM_ROLE='inferance' is not one of training|inference|unknown; ignored" "$TMP/chain.err")" 2 "a bad NCCLSHIM_ROLE is printed by the first process, and by the one with other settings"
is "$(grep -c "NCCLSHIM_TAG='often'" "$TMP/chain.err")" 1 "which prints its own bad setting"
is "$(warnings "$TMP/chain.err")" 3 "six processes, two sets of bad settings: three lines"
NCCLSHIM_MODE=off NCCLSHIM_ROLE=inferance LD_PRELOAD=$SHIM env "$TRUE" 2> "$TMP/off.err"
is "$(warnings "$TMP/off.err")" 0 "NCCLSHIM_MODE=off: the shim only forwards, and says nothing of its unused settings"

# The typo that turns protection off: on stderr, in the records, and --check fails.
run role NCCLSHIM_ROLE=inferance
is "$(cat "$TMP/role/rc")" 0 "a bad NCCLSHIM_ROLE does not harm the application"
is "$(grep -c "NCCLSHIM_ROLE='inferance' is not one of training|inference|unknown" "$TMP/role/err")" 1 "it is printed once, though timeout also loaded the shim"
is "$(jqr "$TMP/role/rec" 'select(.type=="warning" and .what=="bad-setting") | .message' | grep -c "NCCLSHIM_ROLE='inferance'")" 1 "and recorded as a bad setting"
"$INSPECT" --check "$TMP/role/rec" > "$TMP/role/check.out" 2> "$TMP/role/check.err"
is "$?" 1 "--check fails on it"
like "$(cat "$TMP/role/check.err")" "^PROBLEM malformed setting in 1 process \(.* pid [0-9]+\): NCCLSHIM_ROLE='inferance' is not one of .*; the shim failed open with the rest of its settings: fix it$" "naming the setting (strict mode, which concerns the policy only, unmentioned)"

# Pattern lists that cannot mean what they say.
NCCLSHIM_INFERENCE_TITLES='ray::Vllm*, ray::Sglang*' NCCLSHIM_FULL_API= NCCLSHIM_TRAINER_CALLSITES="$(printf 'x%.0s' $(seq 1 300))" \
    LD_PRELOAD=$SHIM env "$TRUE" 2> "$TMP/pat.err"
like "$(cat "$TMP/pat.err")" "NCCLSHIM_INFERENCE_TITLES pattern ' ray::Sglang\*' has a space at an end" "a pattern with a space after the comma is reported"
like "$(cat "$TMP/pat.err")" "NCCLSHIM_FULL_API is set but holds no pattern" "an empty pattern list is reported"
like "$(cat "$TMP/pat.err")" "NCCLSHIM_TRAINER_CALLSITES pattern 1 is 300 bytes long \('x{30}\.\.\.'\): longer than 255, it never matches" "a pattern too long to match is reported, cut"
NCCLSHIM_INFERENCE_TITLES='ray::Vllm*,,ray::Sglang*' NCCLSHIM_ROLE=Inference LD_PRELOAD=$SHIM env "$TRUE" 2> "$TMP/patok.err"
is "$(warnings "$TMP/patok.err")" 0 "good patterns (an empty item is skipped) and a role in capitals are accepted quietly"

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
