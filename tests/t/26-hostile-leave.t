#!/bin/bash
# A process that leaves with a communicator alive without exit() (_exit, as
# Python's os._exit and every multiprocessing child do; a fatal signal; the
# scheduler's SIGTERM): its records still hold the communicator's end with its
# traffic, and the exit record says how it left; the process ends as it would
# have without the shim (same status, same signal).
. "$(dirname "$0")/../tap.sh"

# leave <how> <expected status>
leave() {
    local d=$TMP/$1
    mkdir -p "$d"
    # (in a subshell whose stderr is kept: the shell's "Segmentation fault" line goes there; the
    # exit after it keeps bash from exec'ing the last command in the subshell's place, which would
    # leave that line to this shell)
    (NCCLSHIM_LOG_DIR=$d/rec LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 30)" "$BIN/leave_client" "$1" > "$d/out" 2> "$d/err"
     exit $?) 2> "$d/shell"
    local st=$?
    # (said as a comment instead: a signal here is what the test asks for)
    [ "$st" -le 128 ] || [ "$st" -ne "$2" ] || diag "leave_client $1: killed on purpose (SIG$(kill -l $((st - 128))))"
    is "$st" "$2" "$1: the process ends as without the shim (status $2)"
    [ "$st" -eq "$2" ] || diag "its stderr and the shell's:" "$(cat "$d/err" "$d/shell")"
    is "$(jqr "$d/rec" 'select(.type=="comm_end") | [.how, .ops.AllReduce.count, .ops.AllReduce.bytes] | map(tostring) | join(",")')" '"exit,1,256"' \
        "$1: the live communicator's end and traffic are recorded"
}
leave _exit 7
is "$(jqr "$TMP/_exit/rec" 'select(.type=="exit") | [.by, .comms_alive] | map(tostring) | join(",")')" '"_exit,1"' "_exit: the exit record says so"
leave _Exit 7
if [ -n "${SHIM_PRELOAD_EXTRA:-}" ]; then
    # The sanitizer runtime, loaded first, handles SIGSEGV itself (its report, then abort or
    # its own exit): the shim's handler is not installed over it, as over any earlier handler.
    for _ in 1 2 3 4 5 6; do ok 0 "# SKIP SIGSEGV belongs to the sanitizer runtime (make test-asan)"; done
else
    leave segv $((128 + 11))
    is "$(jqr "$TMP/segv/rec" 'select(.type=="exit") | [.by, .signal] | map(tostring) | join(",")')" '"signal,11"' "SIGSEGV: the exit record names the signal"
    leave fault $((128 + 11))
    is "$(jqr "$TMP/fault/rec" 'select(.type=="exit") | [.by, .signal] | map(tostring) | join(",")')" '"signal,11"' "a real fault (NULL store) too"
fi
leave abort $((128 + 6))
is "$(jqr "$TMP/abort/rec" 'select(.type=="exit") | [.by, .signal] | map(tostring) | join(",")')" '"signal,6"' "abort(): SIGABRT"
leave term $((128 + 15))
# The application's own SIGTERM handler replaces the shim's and ends with _exit(3).
leave handler 3
is "$(jqr "$TMP/handler/rec" 'select(.type=="exit") | .by')" '"_exit"' "an application's handler keeps its behaviour; its _exit still writes the records"

# A vfork child's _exit shares the parent's memory and file: it writes nothing in its name.
leave vfork 5
child=$(sed -n 's/^child //p' "$TMP/vfork/out")
is "$(jqr "$TMP/vfork/rec" "select(.pid==$child)" | wc -l)" 0 "a vfork child's _exit writes no record"
is "$(jqr "$TMP/vfork/rec" 'select(.type=="exit")' | wc -l)" 1 "one exit record, the parent's"

# SIGTERM from outside (the job scheduler), while the process waits.
# (in a subshell whose stderr is kept, as leave's: the shell's "Terminated" line goes there)
mkdir -p "$TMP/kill"
(
    NCCLSHIM_LOG_DIR=$TMP/kill/rec LD_PRELOAD=$SHIM "$BIN/leave_client" wait > /dev/null 2>&1 &
    pid=$!
    end=$((SECONDS + $(tap_scale 30)))
    while [ "$SECONDS" -lt "$end" ]; do
        [ -n "$(jqr "$TMP/kill/rec" 'select(.type=="comm")' 2> /dev/null)" ] && break
        sleep 0.1 # polling for the file (bounded: 30 s on a quiet machine), not synchronising on a duration
    done
    kill -TERM "$pid"
    wait "$pid"
    echo $? > "$TMP/kill/status"
) 2> "$TMP/kill/shell"
diag "leave_client wait: killed on purpose (SIGTERM), as a job scheduler does"
is "$(cat "$TMP/kill/status")" $((128 + 15)) "SIGTERM from outside: killed by it, as without the shim"
is "$(jqr "$TMP/kill/rec" 'select(.type=="comm_end") | .ops.AllReduce.count')" 1 "and the communicator's traffic is recorded"

# exit() is unchanged: one exit record, by exit.
mkdir -p "$TMP/normal"
NCCLSHIM_LOG_DIR=$TMP/normal/rec LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 30)" "$BIN/fork_client" > /dev/null 2>&1
is "$(jqr "$TMP/normal/rec" 'select(.type=="exit") | .by' | sort | uniq -c | awk '{print $1, $2}')" '2 "exit"' "exit(): each process's exit record says exit, once"
# A non-blocking init (blocking=0) returns ncclInProgress; its end is recorded
# when ncclCommGetAsyncError reveals it, once, however often it is polled.
mkdir -p "$TMP/nb"
FAKE_NCCL_INPROGRESS_POLLS=3 NCCLSHIM_LOG_DIR=$TMP/nb/rec LD_PRELOAD=$SHIM timeout -k 5 "$(tap_scale 30)" "$BIN/leave_client" nonblocking > "$TMP/nb/out" 2> "$TMP/nb/err"
is "$?" 0 "non-blocking init: the client's init, polls and destroy pass"
is "$(jqr "$TMP/nb/rec" 'select(.type=="comm") | .result_str')" '"ncclInProgress"' "the comm record has the in-progress result"
is "$(jqr "$TMP/nb/rec" 'select(.type=="comm_init_end") | [.result_str, .by, .cuda_device] | map(tostring) | join(",")')" \
    '"ncclSuccess,ncclCommGetAsyncError,0"' "comm_init_end records the final result, who revealed it, and the device"
is "$(jqr "$TMP/nb/rec" 'select(.type=="comm_init_end")' | wc -l)" 1 "once, though the application polled 7 times"
is "$(jqr "$TMP/nb/rec" 'select(.type=="comm_init_end") | .comm')" "$(jqr "$TMP/nb/rec" 'select(.type=="comm") | .comm')" "it names the same communicator"
is "$("$INSPECT" --json "$TMP/nb/rec" | jq -c '[.communicators[].ranks[].result]')" '[0]' "inspect takes the final result for the rank"
# The same init ending in an error there: inspect reports the failed init.
sed 's/"result":0,"result_str":"ncclSuccess","by"/"result":2,"result_str":"ncclSystemError","by"/' "$TMP/nb/rec"/*.jsonl > "$TMP/nb/failed.jsonl"
mkdir -p "$TMP/nb/f"; mv "$TMP/nb/failed.jsonl" "$TMP/nb/f/ncclshim.vm.1.jsonl"
like "$("$INSPECT" --check "$TMP/nb/f" 2>&1)" 'init failed on rank 0 .*result 2 \(ncclSystemError\)' "an init that fails after ncclInProgress is reported by --check"
done_testing
