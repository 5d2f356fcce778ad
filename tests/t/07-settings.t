#!/bin/bash
# Bad settings and hostile environments: a clear message naming the variable and
# the fix, the application unharmed, nothing lost that can be kept.
. "$(dirname "$0")/../tap.sh"
run() { # run <dir> <env...>
    local d=$TMP/$1; shift
    mkdir -p "$d"
    env NCCLSHIM_LOG_DIR="$d/rec" LD_PRELOAD="$SHIM" "$@" timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked basic > "$d/out" 2> "$d/err"
    echo $? > "$d/rc"
}

run mode NCCLSHIM_MODE=obsrve
is "$(cat "$TMP/mode/rc")" 0 "a bad NCCLSHIM_MODE does not harm the application"
like "$(cat "$TMP/mode/err")" "NCCLSHIM_MODE='obsrve' is not one of enforce\|observe\|off; using enforce" "stderr names the variable, the value and what is used"
is "$(jqr "$TMP/mode/rec" 'select(.type=="warning") | .what')" '"bad-setting"' "and a warning record keeps it"
is "$(jqr "$TMP/mode/rec" 'select(.type=="load") | .mode')" '"enforce"' "enforce (the default) is used"

run pycs NCCLSHIM_PYTHON_CALLSITE=yes
like "$(cat "$TMP/pycs/err")" "NCCLSHIM_PYTHON_CALLSITE='yes' is not 0 or 1" "a bad NCCLSHIM_PYTHON_CALLSITE is reported"

run pushw NCCLSHIM_IPC_PUSH_WAIT_US=-5
is "$(cat "$TMP/pushw/rc")" 0 "a bad NCCLSHIM_IPC_PUSH_WAIT_US does not harm the application"
like "$(cat "$TMP/pushw/err")" "NCCLSHIM_IPC_PUSH_WAIT_US='-5' is not a number in 0..1000000; using 200" "stderr names the variable, its range and the default used"

run copy NCCLSHIM_IPC_COPY=kernel
is "$(cat "$TMP/copy/rc")" 0 "a bad NCCLSHIM_IPC_COPY does not harm the application"
like "$(cat "$TMP/copy/err")" "NCCLSHIM_IPC_COPY='kernel' is not one of auto\|ce\|sm; using auto" "stderr names the variable, its values and the default used"
for v in auto ce sm CE; do
    run "copy-$v" NCCLSHIM_IPC_COPY=$v
    is "$(grep -c 'NCCLSHIM_IPC_COPY' "$TMP/copy-$v/err")" 0 "NCCLSHIM_IPC_COPY=$v is accepted quietly"
done

run names NCCLSHIM_WEIGHT_UPDTE=ipc NCCLSHIM_IPC_STREAMS=2 NCCLSHIM_IPC_TRACE=0
is "$(cat "$TMP/names/rc")" 0 "unknown NCCLSHIM_ variables do not harm the application"
like "$(cat "$TMP/names/err")" "NCCLSHIM_WEIGHT_UPDTE is not a setting of ncclshim \(misspelt\? docs/policy.md lists them\); ignored" "a misspelt variable's name is reported"
like "$(cat "$TMP/names/err")" "NCCLSHIM_IPC_STREAMS is no longer used \(an ipc broadcast runs on the caller's stream\); unset it" "a retired one says so"
is "$(grep -c 'NCCLSHIM_IPC_TRACE' "$TMP/names/err")" 0 "the debug trace switch is known"
is "$(jqr "$TMP/names/rec" 'select(.type=="warning" and .what=="bad-setting") | .what' | wc -l)" 2 "both kept as bad-setting warning records"

# observe: the root decides, and passes through all the same (its reason says what it would do).
run obs NCCLSHIM_MODE=observe NCCLSHIM_RULES='*:drop'
is "$(jqr "$TMP/obs/rec" 'select(.type=="comm" and .fn=="ncclCommInitRank") | .action')" '"passthrough"' "observe passes through what a rule would drop"
like "$(jqr "$TMP/obs/rec" 'select(.type=="comm" and .fn=="ncclCommInitRank") | .action_reason')" 'NCCLSHIM_MODE=observe on the root: would be drop' "and says what it would have done"

# Unwritable record directory: records are off, the application runs on.
mkdir -p "$TMP/ro"; : > "$TMP/ro/file"
mkdir -p "$TMP/unw"
FAKE_NCCL_LOG=$TMP/unw/fake.log NCCLSHIM_LOG_DIR=$TMP/ro/file/sub LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked basic > "$TMP/unw/out" 2> "$TMP/unw/err"
is "$?" 0 "an impossible NCCLSHIM_LOG_DIR does not harm the application"
like "$(cat "$TMP/unw/err")" "cannot create record directory .*/ro/file/sub: Not a directory; records are off \(set NCCLSHIM_LOG_DIR" "stderr names the directory, the cause and the fix"
is "$(grep -c 'ncclAllReduce' "$TMP/unw/fake.log")" 2 "calls are still forwarded"

run long NCCLSHIM_LOG_DIR=/tmp/$(printf 'x%.0s' $(seq 1 5000))
is "$(cat "$TMP/long/rc")" 0 "an over-long NCCLSHIM_LOG_DIR does not harm the application"
like "$(cat "$TMP/long/err")" 'NCCLSHIM_LOG_DIR is too long' "and is reported"

# A host name longer than a host name can be: named as such (it used to surface
# as a record file name too long, "set NCCLSHIM_LOG_DIR"), and this host's own used.
run longhost NCCLSHIM_HOSTNAME=$(printf 'h%.0s' $(seq 1 5000))
is "$(cat "$TMP/longhost/rc")" 0 "an over-long NCCLSHIM_HOSTNAME does not harm the application"
like "$(cat "$TMP/longhost/err")" "NCCLSHIM_HOSTNAME is too long \('h{40}\.\.\.', 5000 bytes; a host name has at most 64\); using this host's own name" "stderr names the host name setting, cut"
unlike "$(cat "$TMP/longhost/err")" "LOG_DIR|cannot open record file" "not the record directory"
is "$(jqr "$TMP/longhost/rec" 'select(.type=="load") | .host')" "\"$(hostname | cut -d. -f1)\"" "records go on, under this host's name"

# Host identity override (test-only) and strange bytes in settings stay valid JSON.
run host NCCLSHIM_HOSTNAME=node-7 NCCLSHIM_ROLE=$'tr\xffain"\n'
is "$(ls "$TMP/host/rec")" "$(jqr "$TMP/host/rec" 'select(.type=="load") | "ncclshim.node-7.\(.pid).\(.host_identity.boot_id[0:8]).\(.start_ticks).jsonl"' | tr -d '"')" "NCCLSHIM_HOSTNAME names the host (ncclshim.<host>.<pid>.<boot8>.<start>.jsonl)"
is "$(jqr "$TMP/host/rec" 'select(.type=="comm") | .host' | sort -u)" '"node-7"' "and every record carries it"
like "$(grep -o '"NCCLSHIM_ROLE":"[^}]*' "$TMP/host/rec"/*.jsonl | head -1)" 'tr\\ufffdain\\"\\u000a' "invalid UTF-8, quotes and newlines are escaped"
like "$(jqr "$TMP/host/rec" 'select(.type=="comm") | .role_reason' | head -1)" 'ignored' "a bad NCCLSHIM_ROLE is ignored, and the reason says so"

# fork: the child writes its own file, with its own load record.
mkdir -p "$TMP/fork"
out=$(NCCLSHIM_LOG_DIR=$TMP/fork/rec LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 30)" "$BIN/fork_client" 2>&1)
is "$?" 0 "fork client passes"
child=$(echo "$out" | sed -n 's/^child //p')
is "$(ls "$TMP/fork/rec" | wc -l)" 2 "parent and child each have a record file"
is "$(jq -c 'select(.type!="library") | .type' "$TMP/fork/rec"/ncclshim.*."$child".*.jsonl | tr '\n' ' ')" '"load" "unique_id" "decision" "comm" "comm_end" "exit" ' "the child's file starts with its own load record (and the child serves its own ID)"
is "$(jq -c 'select(.type=="comm")' "$TMP/fork/rec"/*.jsonl | wc -l)" 2 "no record written twice"

# A process that never uses NCCL leaves nothing behind.
NCCLSHIM_LOG_DIR=$TMP/none LD_PRELOAD=$SHIM true
ok $([ ! -e "$TMP/none" ] && echo 0 || echo 1) "a process that never calls NCCL writes no record file"
done_testing
