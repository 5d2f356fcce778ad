#!/bin/bash
# docs/design.md, "NCCL's own communicator" and "NCCL_NET cannot undo a
# redirect" (issue 13): the application holds NCCL's own communicator
# whenever NCCL made one, so that NCCL 2.29/2.30's functions, and functions of
# releases the shim has never seen, always get a pointer NCCL made; shim-only
# communicators answer every function of the table themselves; the table
# stays right across destroy and address reuse; NCCL_NET cannot undo a socket
# redirect, and is hidden from nothing else.  Against the fake NCCL 2.30.7
# (tests/fake/new), which rejects every communicator it did not make.
. "$(dirname "$0")/../tap.sh"
NEW=$FAKE/new/libnccl.so.2

run() { # run <dir> <client...>: the client under the shim, with its call log and records in <dir>
    local d=$TMP/$1; shift
    mkdir -p "$d"
    env FAKE_NCCL_LOG="$d/fake.log" NCCLSHIM_LOG_DIR="$d/rec" LD_PRELOAD="$SHIM" \
        timeout -k 5 "$(tap_scale 60)" "$@" > "$d/out" 2> "$d/err"
    echo $? > "$d/rc"
}
newcomm() { sed -n 's/.*ncclCommInitRank[A-Za-z]* .* \*newcomm=\(0x[0-9a-f]*\) .*/\1/p' "$1" | head -1; }

# --- NCCL's communicators: passthrough and socket, linked and dlsym callers ---
for how in linked dlopen; do
    if [ $how = linked ]; then client=("$BIN/newer_linked" linked); else client=("$BIN/newer_dlopen" dlopen "$NEW"); fi
    for action in passthrough socket; do
        d=$how-$action
        rules=""; [ $action = socket ] && rules='nranks=1:socket'
        NCCLSHIM_RULES=$rules run $d "${client[@]}" nccl
        is "$(cat "$TMP/$d/rc")" 0 "$how, $action: the client's calls all succeed"
        import_checks "$TMP/$d/out"
        unlike "$(cat "$TMP/$d/fake.log")" 'INVALID-COMM' "$how, $action: NCCL never got a pointer it did not make"
        is "$(sed -n 's/^HANDLE //p' "$TMP/$d/out")" "$(newcomm "$TMP/$d/fake.log")" \
            "$how, $action: the application holds NCCL's own communicator"
        is "$(jqr "$TMP/$d/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | .action' | tr -d '"')" "$action" \
            "$how, $action: recorded as $action"
        is "$(jqr "$TMP/$d/rec" 'select(.type=="comm" and .fn=="ncclCommGrow" and .parent) | [.group, .parent, .nranks, .action]')" \
            "$(jqr "$TMP/$d/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | [.group + "/grow0", .group, 2, .action]')" \
            "$how, $action: ncclCommGrow recorded like a split: parent, ranks, and the parent's action (it inherits it)"
        is "$(jqr "$TMP/$d/rec" 'select(.type=="comm_end") | .ops.AllReduce.count // 0' | sort | tr '\n' ' ')" "0 0 1 " \
            "$how, $action: the three communicators end (the added rank's too), the grown one with its all-reduce counted"
    done
done
# A grow of a socket communicator: the existing rank takes socket from its parent, the added
# rank (no parent) from the grow's unique ID, which carries the action in its tail.
grows=$(grep 'ncclCommGrow ' "$TMP/linked-socket/fake.log")
is "$(echo "$grows" | grep -c ' net=Socket idtail=0 ')" 2 "socket: both ranks of the grow reached NCCL with netName Socket"
is "$(jqr "$TMP/linked-socket/rec" 'select(.type=="comm" and .fn=="ncclCommGrow") | [.action, .inherited.from]' | sort | tr '\n' ' ')" \
    '["socket","'"$(jqr "$TMP/linked-socket/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | .group' | tr -d '"')"'"] ["socket","the grow'"'"'s unique ID"] ' \
    "socket: the existing rank inherits from its parent, the added one from the ID"
is "$(grep -c ' net=default idtail=1 ' <<< "$(grep 'ncclCommGrow ' "$TMP/linked-passthrough/fake.log")")" 2 \
    "passthrough: both grow as the application asked, the ID untouched"
init=$(grep ncclCommInitRankConfig "$TMP/linked-socket/fake.log")
like "$init" 'netName=Socket blocking=1 ver=23007 ctas=3,5 perpeer=8 cfg=96,23007,2,3,5,1,6,0,newer,1,1,7,8,1,1,9,10,0,1 ' \
    "socket: NCCL got the caller's 2.30 config with every field kept, netName Socket"
like "$(jqr "$TMP/linked-socket/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | [.net, .net_by]')" \
    '^\["Socket","the socket action: config netName \\"Socket\\""\]$' "socket: the record says which network NCCL was told, and why"

like "$("$INSPECT" -v "$TMP/linked-socket/rec" 2>&1)" 'net told: Socket \(the socket action: config netName "Socket"\)' \
    "socket: ncclshim-inspect -v shows the network NCCL was told, and why"
like "$("$INSPECT" --json "$TMP/linked-socket/rec" 2>&1)" '"net_by": "the socket action' "and --json has net_by"

# --- NCCL 2.29+'s properties of a redirected communicator --------------------
# NCCL sets up GIN whatever the config's netName: a device communicator on a
# socket communicator moves its data over the fabric, and --check says so.
is "$(jqr "$TMP/linked-socket/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | .nccl_properties.ginType')" 0 \
    "socket: the record has NCCL's properties (no GIN here)"
is "$(jqr "$TMP/linked-passthrough/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | has("nccl_properties")')" false \
    "passthrough: NCCL is asked nothing the application did not ask"
is "$(grep -c ncclCommQueryProperties "$TMP/linked-passthrough/fake.log")" 1 "(the application's own query only)"
is "$(jqr "$TMP/linked-socket/rec" 'select(.type=="comm_end" and .devcomms) | .devcomms')" 1 \
    "socket: comm_end counts the device communicator the application made"
"$INSPECT" --check "$TMP/linked-socket/rec" > "$TMP/gin0.out" 2>&1
unlike "$(cat "$TMP/gin0.out")" 'redirect bypassed' "socket, a device communicator, no GIN: no bypass problem"
FAKE_NCCL_GIN_TYPE=3 NCCLSHIM_RULES='nranks=1:socket' run gin "$BIN/newer_linked" linked nccl
is "$(jqr "$TMP/gin/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | .nccl_properties.ginType')" 3 \
    "socket on a GIN-capable NCCL: the record says GIN (GDAKI)"
"$INSPECT" --check "$TMP/gin/rec" > "$TMP/gin.out" 2>&1
rc=$?
ok $([ $rc = 1 ] && echo 0 || echo 1) "--check fails (exit $rc)"
like "$(cat "$TMP/gin.out")" 'redirect bypassed by the device API on rank 0: .*GPU-initiated networking \(GDAKI\)' \
    "and names the device API's GIN as what bypasses the redirect"

# --- a communicator the shim dropped: the shim answers every function -------
for how in linked dlopen; do
    if [ $how = linked ]; then client=("$BIN/newer_linked" linked); else client=("$BIN/newer_dlopen" dlopen "$NEW"); fi
    d=$how-drop
    NCCLSHIM_RULES='nranks=1:drop' run $d "${client[@]}" shim
    is "$(cat "$TMP/$d/rc")" 0 "$how, drop: the client's expectations hold"
    import_checks "$TMP/$d/out"
    is "$(grep -c -E 'ncclComm(Init|Suspend|Resume|MemStats|GetUniqueId|Grow|QueryProperties)|ncclWinGetUserPtr|Signal|ncclTeam' "$TMP/$d/fake.log")" 0 \
        "$how, drop: none of the table's calls reached NCCL (the device API's team functions and properties included)"
    like "$(cat "$TMP/$d/err")" 'ncclTeamLsa on communicator .* no NCCL device runtime' \
        "$how, drop: the empty LSA team is reported, once, naming why"
    like "$(cat "$TMP/$d/err")" 'ncclCommGrow on communicator .* which this shim dropped' \
        "$how, drop: a refused grow is reported, naming the action"
    like "$(cat "$TMP/$d/err")" 'ncclCommCount on a communicator .* already destroyed' \
        "$how, drop: a destroyed handle is reported as such"
done

# --- address reuse: NCCL hands a freed address to the next communicator ----
# (Under test-asan, no quarantine: freed memory is handed out again at once, as glibc does.)
# reuse_checks <dir> <what the run did> <where NCCL reused> <whose traffic>: the run went
# well, NCCL did reuse addresses, and each communicator's end record has its own traffic.
reuse_checks() {
    local d=$TMP/$1 reused
    is "$(cat "$d/rc")" 0 "$2"
    reused=$(awk '/^REUSE/ {print $3}' "$d/out" | sort | uniq -d | wc -l)
    ok $([ "$reused" -gt 0 ] && echo 0 || echo 1) "NCCL reused addresses$3 ($reused of them)"
    is "$(jqr "$d/rec" 'select(.type=="comm_end") | [.comm, (.ops.AllReduce.count // 0)] | map(tostring) | join(" ")' | tr -d '"')" \
       "$(awk '/^REUSE/ {print $3" "$4}' "$d/out")" \
       "each communicator's end record carries its own traffic, $4"
}
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0" run reuse "$BIN/newer_linked" linked reuse 300
reuse_checks reuse "300 communicators made, used and destroyed" "" "whatever address it had"
# Made and destroyed by one thread, used by another: the user thread's last-seen
# communicator (shim/registry/comm.h) must not count into a destroyed one at a reused address.
# FAKE_NCCL_REUSE_FIFO: an address comes back with another of the shim's structs than it had.
FAKE_NCCL_REUSE_FIFO=1 run reuse2 "$BIN/newer_linked" linked reuse2 50
reuse_checks reuse2 "100 communicators made and destroyed by one thread, used by another" " across threads" \
    "counted by another thread than its creator's"

# --- NCCL_NET: hidden from the socket inits only, even when they race -------
NCCL_NET=IB FAKE_NCCL_INIT_DELAY_MS=3 NCCLSHIM_RULES='nranks=1:socket' run netrace "$BIN/newer_linked" linked netrace 25
is "$(cat "$TMP/netrace/rc")" 0 "25 socket and 25 passthrough inits in two threads at once"
sock=$(grep -c 'ncclCommInitRankConfig .* netName=Socket .* net=Socket ' "$TMP/netrace/fake.log")
plain=$(grep -c 'ncclCommInitRank .* net=IB ' "$TMP/netrace/fake.log")
is "$sock $plain" "25 25" "every redirected init used Socket, every other one the container's NCCL_NET=IB"
is "$(jqr "$TMP/netrace/rec" 'select(.type=="comm") | .net' | sort | uniq -c | awk '{print $2":"$1}' | tr '\n' ' ')" \
   '"IB":25 "Socket":25 ' "and the records say so"
NCCL_NET=IB NCCL_ENV_PLUGIN=myenv NCCLSHIM_RULES='nranks=1:socket' run envplugin "$BIN/newer_linked" linked nccl
like "$(jqr "$TMP/envplugin/rec" 'select(.type=="comm" and .fn!="ncclCommGrow") | .action_reason')" \
    'env plugin .*NCCL_ENV_PLUGIN=myenv' "an NCCL env plugin with NCCL_NET set: passthrough, and the reason says why"

# --- an NCCL newer than the table: one warning per process -----------------
# (2.31 and 2.32 are in the table: no warning; 2.33 is not: one.)
for v in 23102 23203; do
    FAKE_NCCL_VERSION=$v run known$v "$BIN/newer_linked" linked nccl
    is "$(cat "$TMP/known$v/rc") $(grep -c 'newer than the newest NCCL' "$TMP/known$v/err")" "0 0" \
        "NCCL $v: known to the table, no warning"
done
FAKE_NCCL_VERSION=23300 run newer "$BIN/newer_linked" linked nccl
is "$(cat "$TMP/newer/rc")" 0 "NCCL 2.33: NCCL's communicators work as before"
is "$(grep -c 'newer than the newest NCCL whose functions this shim knows' "$TMP/newer/err")" 1 \
    "NCCL 2.33: one warning, naming the risk for shim-only communicators"
done_testing
