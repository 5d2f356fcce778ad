#!/bin/bash
# Interposition case 1: a caller linked against libnccl (like torch.distributed).
# Every call reaches the real library with the same arguments (the handle
# replaced by the real communicator), and the records tell what happened.
. "$(dirname "$0")/../tap.sh"

run() { # run <name> <env...> -- runs the linked client basic scenario
    local name=$1; shift
    mkdir -p "$TMP/$name"
    env FAKE_NCCL_LOG="$TMP/$name/fake.log" NCCLSHIM_LOG_DIR="$TMP/$name/rec" "$@" \
        timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked basic > "$TMP/$name/out" 2> "$TMP/$name/err"
    echo $? > "$TMP/$name/rc"
}

run plain
run shim LD_PRELOAD="$SHIM"
is "$(cat "$TMP/plain/rc")" 0 "client passes without the shim"
is "$(cat "$TMP/shim/rc")" 0 "client passes under the shim"
import_checks "$TMP/shim/out"
like "$(cat "$TMP/shim/out")" 'FNOBJ libncclshim.so' "the linked symbol resolves to the shim"

# Forwarding is exact: the same calls, in the same order, with the same arguments,
# apart from addresses (stack and heap differ run to run) and the shim's own
# queries of a new communicator (ncclCommCuDevice/UserRank/Count after create).
norm() { sed -E 's/0x[0-9a-f]+/P/g; s/ id=[0-9a-f]+/ id=ID/g; s/ idtail=[01]//g; s/^a [0-9]+ /a /' "$1" | grep -v -E '^a (ncclGetVersion version=P \*version=22809 -> 0)$'; }
shim_calls=$(norm "$TMP/shim/fake.log" | grep -v -E '^a nccl(CommCuDevice|CommUserRank|CommCount) comm=P (device|rank|count)=P .*-> 0$')
plain_calls=$(norm "$TMP/plain/fake.log" | grep -v -E '^a nccl(CommCuDevice|CommUserRank|CommCount) comm=P (device|rank|count)=P .*-> 0$')
is "$shim_calls" "$plain_calls" "the real library sees the same calls with the same arguments"
unlike "$(cat "$TMP/shim/fake.log")" 'INVALID-COMM' "no shim handle ever reaches the real library"

# The application holds NCCL's own communicator (docs/design.md, "NCCL's own
# communicator"), and every call that carried it reached NCCL with it unchanged.
handle=$(sed -n 's/^HANDLE //p' "$TMP/shim/out")
real=$(jqr "$TMP/shim/rec" 'select(.type=="comm" and .fn=="ncclCommInitRank") | .comm' | tr -d '"')
is "$handle" "$real" "the application holds NCCL's own communicator"
like "$(grep ncclAllReduce "$TMP/shim/fake.log" | head -1)" "comm=$real " "AllReduce reached NCCL with that comm $real"

rec="$TMP/shim/rec"
is "$(ls "$rec" | wc -l)" 1 "one record file per process"
is "$(stat -c %a "$rec")" 700 "record directory is 0700"
is "$(stat -c %a "$(record_file "$rec")")" 600 "record file is 0600"
like "$(basename "$(record_file "$rec")")" '^ncclshim\.[^.]+\.[0-9]+\.[0-9a-f]{8}\.[0-9]+\.jsonl$' "file named by host, pid, boot id and start time"
is "$(jqr "$rec" '.type' | head -1)" '"load"' "the first record is the load record"
is "$(jqr "$rec" 'select(.type=="load") | [.shim_version, .mode]')" '["0.1.0","enforce"]' "load record: version and mode"
is "$(jqr "$rec" 'select(.type=="library") | [.slot, .version, .how, .functions]')" '[0,22809,"symbol",48]' "library record: slot 0, version, found as a global symbol"
is "$(jqr "$rec" 'select(.type=="unique_id") | .id_hash' | wc -l)" 2 "a record per unique ID"
is "$(jqr "$rec" 'select(.type=="comm") | .fn' | tr '\n' ' ')" '"ncclCommInitRank" "ncclCommSplit" "ncclCommInitRankConfig" ' "a record per communicator"
is "$(jqr "$rec" 'select(.type=="comm" and .fn=="ncclCommInitRank") | [.rank,.nranks,.cuda_device,.result,.caller.api,.action]')" \
   '[0,1,0,0,"other","passthrough"]' "comm record: rank, size, device, result, API, action"
is "$(jqr "$rec" 'select(.type=="comm" and .fn=="ncclCommInitRank") | (.handle == "'"$handle"'")')" true "comm record names the handle the application got"
idh=$(jqr "$rec" 'select(.type=="unique_id") | .id_hash' | head -1)
is "$(jqr "$rec" 'select(.type=="comm" and .fn=="ncclCommInitRank") | .group')" "\"id:${idh//\"/}\"" "group is named by the unique ID's hash"
is "$(jqr "$rec" 'select(.type=="comm" and .fn=="ncclCommSplit") | [.group, .color, .config.netName, .config.commName]')" \
   "[\"id:${idh//\"/}/split0:color0\",0,\"Socket\",\"my-comm\"]" "split record: child group, color, config"
like "$(jqr "$rec" 'select(.type=="comm") | .duration_us')" '^[0-9]+' "init duration recorded"
is "$(jqr "$rec" 'select(.type=="comm_end" and .how=="destroy") | .ops')" '{"AllReduce":{"count":1,"bytes":16}}' "destroy records the child's traffic"
is "$(jqr "$rec" 'select(.type=="comm_end" and .how=="abort") | .ops')" '{}' "abort records an end with no traffic"
is "$(jqr "$rec" 'select(.type=="comm_end" and .how=="exit") | .ops')" \
   '{"AllReduce":{"count":1,"bytes":16},"Broadcast":{"count":3,"bytes":48},"Send":{"count":1,"bytes":64},"Recv":{"count":1,"bytes":64}}' \
   "traffic of the communicator alive at exit: count and bytes per operation"
is "$(jqr "$rec" 'select(.type=="exit") | [.comms_created, .comms_alive]')" '[3,1]' "exit record"
bad=$(cat "$rec"/*.jsonl | python3 -c 'import sys,json
n=0
for l in sys.stdin:
    d=json.loads(l)
    assert all(k in d for k in ("type","ts","host","pid","tid")), l
    n+=1
print(n)' 2>&1)
like "$bad" '^[0-9]+$' "every line is one JSON object with type, ts, host, pid, tid"

# ncclCommInitAll: one record per rank, one group, the ranks in order.
mkdir -p "$TMP/all"
FAKE_NCCL_LOG=$TMP/all/fake.log NCCLSHIM_LOG_DIR=$TMP/all/rec LD_PRELOAD=$SHIM \
    timeout -k 5 "$(tap_scale 30)" "$BIN/client_linked" linked initall > "$TMP/all/out" 2>&1
is "$?" 0 "ncclCommInitAll client passes under the shim"
import_checks "$TMP/all/out"
is "$(jqr "$TMP/all/rec" 'select(.type=="comm") | [.fn, .rank, .nranks]' | tr '\n' ' ')" \
   '["ncclCommInitAll",0,3] ["ncclCommInitAll",1,3] ["ncclCommInitAll",2,3] ' "one record per rank"
is "$(jqr "$TMP/all/rec" 'select(.type=="comm") | .group' | sort -u | wc -l)" 1 "all in one group"
like "$(jqr "$TMP/all/rec" 'select(.type=="comm") | .group' | head -1)" '^"initall:[^:]+:[0-9]+:0"$' "named initall:<host>:<pid>:<n>"
is "$(jqr "$TMP/all/rec" 'select(.type=="comm_end") | .how' | sort -u)" '"destroy"' "each rank's destroy recorded"

# mode=off: pure forwarding, no records at all.
run off LD_PRELOAD="$SHIM" NCCLSHIM_MODE=off
is "$(cat "$TMP/off/rc")" 0 "client passes with NCCLSHIM_MODE=off"
ok $([ ! -e "$TMP/off/rec" ] && echo 0 || echo 1) "NCCLSHIM_MODE=off writes no records"
is "$(norm "$TMP/off/fake.log")" "$(norm "$TMP/plain/fake.log")" "NCCLSHIM_MODE=off: the real library sees exactly the plain run's calls"
done_testing
