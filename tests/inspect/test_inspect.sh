#!/usr/bin/env bash
# TAP tests for ncclshim-inspect. Run from anywhere: prove -v tests/inspect/test_inspect.sh
# $INSPECT overrides the binary (e.g. an ASan build); $INSPECT_WRAP prefixes every
# run (e.g. "valgrind --leak-check=full --error-exitcode=9 -q").
set -u
cd "$(dirname "$0")/../.." || exit 1
INSPECT=${INSPECT:-tools/ncclshim-inspect}
. tests/built.sh && need_built "$INSPECT"
WRAP=${INSPECT_WRAP:-}
FX=tests/inspect/fixtures
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
# run ARGS...: stdout -> $TMP/out, stderr -> $TMP/err, status -> $rc
run() { $WRAP "$INSPECT" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }
check() { # check DESC CONDITION...
    local d=$1; shift
    if "$@"; then ok "$d"; else nok "$d" "rc=$rc" "stdout:" "$(sed 's/^/#   /' "$TMP/out")" "stderr:" "$(sed 's/^/#   /' "$TMP/err")"; fi
}
has() { grep -qE -- "$1" "$TMP/${2:-out}"; }
jqt() { jq -e "$1" "$TMP/out" >/dev/null; }

echo "1..155"

# --- (1) healthy: training comm (2 ranks, IB) + weight-update comm (3 ranks, 2 hosts, Socket)
run --check "$FX/healthy"
check "healthy: --check exits 0" test "$rc" -eq 0
check "healthy: no stderr" test ! -s "$TMP/err"
check "healthy: header counts" has '^4 processes on 2 hosts, 2 communicators$'
check "healthy: library line" has '^library slot 0: /opt/venv/.*/libnccl.so.2 \(version 2\.28\.9, 4 processes\)$'
check "healthy: training row" has '^id:0x9f3a0c1d +training +passthrough +2/2 +vm +torch +712 +IB +- +AllReduce:240/960Ki Broadcast:6/6\.0Gi$'
check "healthy: weight-update row" has '^id:0x51c0ffee +weight-update +passthrough +3/3 +vm,node2\.cluster\.local +ctypes,torch +1500 +Socket +- +Broadcast:120/6\.0Gi$'
check "healthy: training comm listed first (sorted by init ts)" test "$(grep -m1 -o '^id:0x[0-9a-f]*' "$TMP/out")" = id:0x9f3a0c1d
run --json "$FX/healthy"
check "healthy --json: exit 0 and parses" jqt '.'
check "healthy --json: 4 processes with titles" jqt '(.processes | length) == 4 and (.processes | map(.title) | index("ray::VllmGenerationWorker")) != null'
check "healthy --json: 2 communicators, full group names" jqt '[.communicators[].group] == ["id:0x9f3a0c1d2e4b5a67","id:0x51c0ffee00d1ce42"]'
check "healthy --json: no ipc hops where there is no ipc" jqt '[.communicators[] | .ipc_hops, (.ranks[] | .ipc)] | all(. == null)'
check "healthy --json: ranks sorted, networks joined per rank" jqt '[.communicators[1].ranks[] | [.rank, .network]] == [[0,"Socket"],[1,"Socket"],[2,"Socket"]] and [.communicators[0].ranks[].network] == ["IB","IB"]'
check "healthy --json: rank fields" jqt '.communicators[1].ranks[1] | .host == "node2.cluster.local" and .pid == 901 and .tid == 911 and .comm == "0x2b00a0c0" and .api == "torch" and .role == "inference" and .purpose == "weight-update" and (.purpose_reason | length) > 0 and .action == "passthrough" and .duration_us == 1400000 and .result == 0 and .ops.Broadcast.count == 40'
check "healthy --json: communicator aggregates" jqt '.communicators[1] | .purpose == "weight-update" and .nranks == 3 and .hosts == ["vm","node2.cluster.local"] and .apis == ["ctypes","torch"] and .network == "Socket" and .ops.Broadcast.bytes == 6442450944 and .problems == []'
check "healthy --json: no warnings or input errors" jqt '.warnings == [] and .input_errors == []'
# explicit --nccl-log, logs given before records, and records as plain files
run --check --nccl-log "$FX/healthy/vm.nccl.log" --nccl-log "$FX/healthy/nccl_node2.txt" "$FX"/healthy/*.jsonl
check "healthy: --nccl-log + record files give the same networks" has '^id:0x51c0ffee .* Socket '
run --json "$FX/healthy/nccl_node2.txt" "$FX/healthy/vm.nccl.log" "$FX/healthy"
check "healthy: NCCL logs as plain PATHs are detected, files not read twice" jqt '(.communicators | map(.ranks | length)) == [2,3] and .communicators[0].network == "IB"'
run "$FX/healthy"
cp "$TMP/out" "$TMP/plain"
run -v "$FX/healthy"
check "healthy -v: rank detail with python frame" has '^  rank 1: node2\.cluster\.local pid 901 tid 911 comm 0x2b00a0c0 api torch role inference purpose weight-update \(rank>0 of a training\+inference communicator\) net Socket$'
check "healthy -v: python call site" has '^ +python: /opt/nemo_rl/models/policy/dtensor_policy_worker\.py:812 init_collective$'
check "healthy -v: each rank's role with its reason" eval "has '^  rank 1: node2' && grep -A1 '^  rank 1: node2' \"\$TMP/out\" | tail -1 | grep -qx \"          role: inference (process title 'ray::VllmGenerationWorker' matches inference pattern)\""
run --json "$FX/healthy"
check "healthy --json: each rank's role_reason" jqt '[.communicators[1].ranks[].role_reason] == ["process title '"'"'ray::DTensorPolicyWorker'"'"' matches training pattern", "process title '"'"'ray::VllmGenerationWorker'"'"' matches inference pattern", "process title '"'"'ray::VllmGenerationWorker'"'"' matches inference pattern"]'

# --- (2) missing rank (and an NCCL WARN from the surviving process)
run --check "$FX/missing_rank"
check "missing rank: --check exits 1" test "$rc" -eq 1
check "missing rank: PROBLEM line names the ranks" has '^PROBLEM id:0x00aa11bb: ranks missing: 1,3 of 4$' err
check "missing rank: NCCL WARN attached to the comm" has '^PROBLEM id:0x00aa11bb: NCCL WARN \(n1 pid 100\): socketProgress: Connection closed by remote peer' err
check "missing rank: row shows 2/4 and 2 problems" has '^id:0x00aa11bb +training +passthrough +2/4 +n1 +torch +712 +IB +2 '
run "$FX/missing_rank"
check "missing rank: without --check exit 0, problems listed under the table" eval 'test $rc -eq 0 && has "^  id:0x00aa11bb: ranks missing: 1,3 of 4$"'

# --- (3) purposes disagree
run --check "$FX/purposes"
check "purposes: --check exits 1 with message" eval 'test $rc -eq 1 && has "^PROBLEM id:0x77778888: purposes disagree: weight-update,training$" err'
check "purposes: purpose column says mixed" has '^id:0x77778888 +mixed +passthrough'

# --- (4) dropped communicator that carried data
run --check "$FX/dropped"
check "dropped: --check exits 1 with message" eval 'test $rc -eq 1 && has "^PROBLEM id:0xd0d0d0d0: dropped communicator carried data: 5 calls on rank 0 never reached NCCL$" err'
check "dropped: only that problem" test "$(wc -l <"$TMP/err")" -eq 1

# --- (5) training on Socket, joined from a real NCCL 2.28.9 log
run --check "$FX/socket"
check "socket: --check exits 1" test "$rc" -eq 1
check "socket: PROBLEM line" has '^PROBLEM id:0x1bec0da7: training communicator on Socket \(NCCL log, ranks 0,1\)$' err
run --json "$FX/socket"
check "socket --json: network Socket, problem listed" jqt '.communicators[0].network == "Socket" and (.communicators[0].problems[0] | startswith("training communicator on Socket"))'
run --check "$FX"/socket/*.jsonl
check "socket: without the NCCL log the network is unknown and check passes" eval 'test $rc -eq 0 && has "^id:0x1bec0da7 .* - +- +AllReduce"'

# --- (7) comm pointer formatting: 0x0000abc0 (record) vs 0xABC0 (log) and vice versa
run --json --check "$FX/ptrfmt"
check "ptrfmt: --check exits 0" test "$rc" -eq 0
check "ptrfmt: both ranks joined to IB" jqt '[.communicators[0].ranks[].network] == ["IB","IB"]'

# --- (8) the other rules: duplicate rank, init failed, nranks disagree, not ended;
# a rank re-created after its destroy is not a duplicate
run --check "$FX/misc"
check "misc: --check exits 1 with exactly 4 problems" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 4'
check "misc: duplicate rank" has '^PROBLEM id:0x0dd0dd0d: duplicate rank 0: m pid 1 and m pid 2$' err
check "misc: init failed" has '^PROBLEM id:0x0dd0dd0d: init failed on rank 1 \(m pid 3\): result 2 \(unhandled system error\)$' err
check "misc: nranks disagree" has '^PROBLEM id:0x0dd0dd0d: nranks disagree: 2,3$' err
check "misc: no end record without exit record" has '^PROBLEM id:0x0dd0dd0d: rank 0 \(pid 2\) has no end record: process may have crashed$' err

# --- (6) bad input
mkdir -p "$TMP/bad" "$TMP/emptydir"
cp "$FX"/bad/*.jsonl "$TMP/bad/"
{ printf '{"type":"exit","ts":1.0,"host":"y","pid":9,"tid":9,"comms_created":0,"comms_alive":0}\n'
  printf '{"type":"warning","host":"y","pid":9,"message":"'; head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' 'a'; printf '"}\n'
  printf '{"type":"warning","ts":2.0,"host":"y","pid":9,"tid":9,"what":"bad-setting","message":"after the huge line"}\n'
} >"$TMP/bad/ncclshim.y.9.jsonl"
printf '\000\001\377\376\n\211PNG\032\n' >"$TMP/bad/ncclshim.g.1.jsonl"
: >"$TMP/bad/ncclshim.e.1.jsonl"
head -c 3000 /dev/urandom | tr -d '{\n' >"$TMP/garbage.bin"
run --json "$TMP/bad" "$TMP/garbage.bin" "$TMP/does-not-exist" "$TMP/emptydir"
check "bad: exit 2 (an input could not be read)" test "$rc" -eq 2
check "bad: one line on stderr per bad file or input, 8 in all" test "$(wc -l <"$TMP/err")" -eq 8
check "bad: input_errors: the first 5 bad lines of each file, a summary per file, and the other inputs' errors" jqt '(.input_errors | length) == 17 and ([.input_errors[] | select(.bad_lines > 0)] | length) == 4'
B="$TMP/bad/ncclshim"
check "bad: a file's bad lines: counted, the first five named with their reasons, the rest counted" has "^$B\\.x\\.7\\.jsonl: 7 bad lines skipped: line 2: invalid JSON: [^;]*; line 3: record is an array, not a JSON object; line 4: field 'type' is an integer, expected a string; line 5: record has no 'type'; line 6: field 'pid' is a string, expected an integer; and 2 more\$" err
check "bad: the file's summary in input_errors" jqt '[.input_errors[] | select(.file | endswith("x.7.jsonl")) | .line] == [2,3,4,5,6,0] and (.input_errors[] | select((.file | endswith("x.7.jsonl")) and .line == 0) | [.bad_lines, (.reason | startswith("7 bad lines skipped: line 2: invalid JSON: ")), (.reason | endswith("; and 2 more"))]) == [7, true, true]'
check "bad: truncated last line" has "^$B\\.x\\.8\\.jsonl: 1 bad line skipped: line 3: truncated last line \\(no newline\\): invalid JSON" err
check "bad: 2 MiB line reported and skipped, following line kept" eval "has '^$B\\.y\\.9\\.jsonl: 1 bad line skipped: line 2: line longer than 1048576 bytes \\(2097[0-9]+\\), skipped\$' err && jqt '(.warnings | map({host,pid,what,message})) == [{\"host\":\"y\",\"pid\":9,\"what\":\"bad-setting\",\"message\":\"after the huge line\"}]'"
check "bad: binary garbage in a record file: 2 lines, on one line, no raw byte" eval "has '^$B\\.g\\.1\\.jsonl: 2 bad lines skipped: line 1: invalid JSON: .*; line 2: invalid JSON: unable to decode byte 0x89 ' err && ! LC_ALL=C grep -q '[^[:print:]]' \"\$TMP/err\""
sed -n '1p;11,12p' "$FX/bad/ncclshim.x.7.jsonl" > "$TMP/ncclshim.ipcbad.7.jsonl"
run "$TMP/ncclshim.ipcbad.7.jsonl"
check "bad: comm_end's ipc with a string count, and with a negative one" has "^$TMP/ncclshim\\.ipcbad\\.7\\.jsonl: 2 bad lines skipped: line 2: field 'ipc\\.in\\.push' is a string, expected an integer; line 3: field 'ipc' has a negative count\$" err
run --json "$TMP/bad" "$TMP/garbage.bin" "$TMP/does-not-exist" "$TMP/emptydir"
check "bad: empty file, garbage log, missing path, empty dir" eval "has '^$B\\.e\\.1\\.jsonl: empty file' err && has '^$TMP/garbage.bin: no NCCL log lines found' err && has '^$TMP/does-not-exist: cannot read: No such file or directory\$' err && has '^$TMP/emptydir: no ncclshim' err"
check "bad: the valid records are all kept" jqt '(.processes | length) == 3 and (.communicators | length) == 1 and .communicators[0].ranks_seen == 1 and .communicators[0].problems == []'
run --check "$TMP/does-not-exist" "$FX/dropped"
check "bad: --check problems win over unreadable input (exit 1)" test "$rc" -eq 1
# random bytes named as records, and as an NCCL log: a bounded report, once, no raw byte
mkdir -p "$TMP/rand"
head -c 2000000 /dev/urandom >"$TMP/rand/ncclshim.r.1.jsonl"
head -c 2000000 /dev/urandom >"$TMP/rand/nccl.log"
run --check --json "$TMP/rand"
check "random bytes: one stderr line per file, and one PROBLEM for the records file" eval 'test "$(grep -vc "^PROBLEM" "$TMP/err")" -eq 2 && test "$(grep -c "^PROBLEM input .*ncclshim\.r\.1\.jsonl: [0-9]* bad lines skipped, the first at line 1\$" "$TMP/err")" -eq 1 && has "nccl\.log: no NCCL log lines found" err'
check "random bytes: the count, the first five, the rest counted; short, printable" eval 'has "ncclshim\.r\.1\.jsonl: [0-9]{3,} bad lines skipped: line 1: (.*; line [0-9]+: ){4}.*; and [0-9]+ more\$" err && ! LC_ALL=C grep -q "[^[:print:]]" "$TMP/err" && test "$(wc -L <"$TMP/err")" -lt 1000'
check "random bytes: input_errors bounded: five lines and the summary" jqt '([.input_errors[] | select(.file | endswith("r.1.jsonl"))] | length) == 6'

# --- real records and NCCL logs from the GPU machine (2x H200, one host, torch + ctypes)
run --check "$FX/gpu_single_host"
check "one host, NCCL names Socket but no channel crosses it: no problem" test "$rc" -eq 0
run --json "$FX/gpu_single_host"
check "real run: torch comm is training on Socket, both ranks joined to NCCL's log" jqt '.communicators[0] | .purpose == "training" and .apis == ["torch"] and ([.ranks[].network] == ["Socket","Socket"])'
check "real run: the ctypes comm's traffic" jqt '.communicators[1] | .apis == ["ctypes"] and .ops.Broadcast.count == 2 and .ops.AllReduce.count == 2'

# --- (9) rendezvous decisions: real records from tests/t/13-rendezvous.t (NCCLSHIM_TEST_KEEP=1)
# rv_socket (scenario "strangers"): socket decided by a root in a third process, 4 stray connections rejected
run --check "$FX/rv_socket"
check "rv_socket: a decided socket communicator has no problem" eval 'test $rc -eq 0 && test ! -s "$TMP/err"'
check "rv_socket: the row shows the action" has '^id:0x3d94d321 +weight-update +socket +2/2 +vm +other '
check "rv_socket: decision summary under the table" has '^  id:0x3d94d321: decided by root 127\.0\.0\.1:37149 \(0x4f9fb520\), 2 rounds: socket, 4 connections rejected$'
run --json "$FX/rv_socket"
check "rv_socket --json: the root's decision record joins on decision_id" jqt '.communicators[0] | .decision.decision_id == "0x4f9fb5207f16aaa4" and .decision.host == "vm" and .decision.pid == 6759 and .decision.stage == "commit" and .decision.missing == "" and (.decision.ranks | map(.local_purpose)) == ["weight-update","inference"] and .fell_back == false and .root == "127.0.0.1:37149"'
check "rv_socket --json: new rank fields" jqt '[.communicators[0].ranks[] | [.decision.by, .decision.rounds, .net, .local_purpose, .end_action, .end_decision_id]] == [["root",2,"Socket","weight-update","socket","0x4f9fb5207f16aaa4"],["root",2,"Socket","inference","socket","0x4f9fb5207f16aaa4"]]'
check "rv_socket --json: top-level decisions name their group" jqt '.decisions | length == 1 and .[0].group == "id:0x3d94d32147d3aca5" and .[0].rejected_connections == 4'
run -v "$FX/rv_socket"
check "rv_socket -v: action, local purpose and decision per rank" eval 'has "^          action: socket \\(purpose weight-update, NCCLSHIM_WEIGHT_UPDATE=socket\\)$" && has "^          local purpose: inference \\(created through other in an inference process" && has "^          decision: by root 127\\.0\\.0\\.1:37149 \\(0x4f9fb520\\), 2 rounds, waited [0-9.]+ ms$"'
run --check "$FX"/rv_socket/ncclshim.vm.6763.jsonl "$FX"/rv_socket/ncclshim.vm.6764.jsonl
check "rv_socket: without the root's records the summary comes from the ranks" eval 'test $rc -eq 0 && has "^  id:0x3d94d321: decided by root 127\\.0\\.0\\.1:37149 \\(0x4f9fb520\\), 2 rounds: socket$"'
run "$FX"/rv_socket/ncclshim.vm.6759.jsonl
check "rv_socket: a decision without its ranks' records is listed in the header" has '^decision vm:6759 127\.0\.0\.1:37149 \(0x4f9fb520\): socket for 2 of 2 ranks; no rank of it in the inputs$'
# NCCL's log says IB although the shim asked for Socket
printf '%s\n' 'vm:6763:6765 [0] NCCL INFO Using network IB' \
  'vm:6763:6765 [0] NCCL INFO ncclCommInitRank comm 0x7fd23c000da0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x1 - Init START' >"$TMP/ib.log"
run --check --nccl-log "$TMP/ib.log" "$FX/rv_socket"
check "redirect ineffective: NCCL's log names another network" has '^PROBLEM id:0x3d94d321: redirect to Socket ineffective on rank 0: the shim set netName Socket but NCCL.s log says it used IB: NCCL_NET or a network plugin overrides' err

# rv_ncclnet: NCCL_NET=IB in both processes overrides the socket redirect
run --check "$FX/rv_ncclnet"
check "rv_ncclnet: redirect ineffective, with the shim's note" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 1 && has "^PROBLEM id:0x0750b4bd: redirect to Socket ineffective on ranks 0,1: NCCL_NET=IB is set in this process and overrides the config.s netName: NCCL will not use Socket; unset NCCL_NET in the weight-update processes$" err'
run -v "$FX/rv_ncclnet"
check "rv_ncclnet -v: the note per rank" has '^          net: Socket \(NCCL_NET=IB is set'

# rv_drop: dropped by the root's decision, and the application still sent data
run --check "$FX/rv_drop"
check "rv_drop: dropped communicator carried data (from comm_end's action)" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 1 && has "^PROBLEM id:0x9be43ea8: dropped communicator carried data: 12 calls on ranks 0,1 never reached NCCL$" err'
mkdir -p "$TMP/endonly" "$TMP/commonly"
for f in "$FX"/rv_drop/*.jsonl; do
  sed '/"type":"comm"/s/"action":"drop",//' "$f" >"$TMP/endonly/${f##*/}"
  sed '/"type":"comm_end"/s/"action":"drop",//' "$f" >"$TMP/commonly/${f##*/}"
done
run --check "$TMP/endonly"
check "dropped: comm_end's action alone is enough" has '^PROBLEM id:0x9be43ea8: dropped communicator carried data: 12 calls on ranks 0,1' err
run --check "$TMP/commonly"
check "dropped: older comm_end without action: the comm record's action" has '^PROBLEM id:0x9be43ea8: dropped communicator carried data: 12 calls on ranks 0,1' err

# rv_noshim: rank 2 ran without the shim, the root gave up after its timeout
run --check "$FX/rv_noshim"
check "rv_noshim: decision fell back, the missing rank left no records" has '^PROBLEM id:0x2fee17d5: decision fell back to passthrough: the root.s rendezvous \(127\.0\.0\.1:46511, vm pid 6642\) gave up after 801 ms with 2 of 3 ranks \(missing 2\); rank 2 left no records: it ran without the shim \(or with NCCLSHIM_MODE=off\), or its records were not collected: preload libncclshim\.so in every rank.s process$' err
check "rv_noshim: exactly that and the missing rank" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 2 && has "^PROBLEM id:0x2fee17d5: rank missing: 2 of 3$" err'
mkdir -p "$TMP/noroot"
for f in "$FX"/rv_noshim/*.jsonl; do grep -v '"type":"decision"' "$f" >"$TMP/noroot/${f##*/}"; done
run --check "$TMP/noroot"
check "rv_noshim without the root's decision record: told by the ranks' records" has '^PROBLEM id:0x2fee17d5: decision fell back to passthrough: the root.s rendezvous \(127\.0\.0\.1:46511\) timed out before every rank arrived; the ranks were told: rendezvous timed out after 800 ms' err

# rv_slowrank: rank 1 came after the root's timeout and fell back on its own
run --check "$FX/rv_slowrank"
check "rv_slowrank: the late rank is named, with the setting to raise" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 1 && has "^PROBLEM id:0xa546f973: decision fell back to passthrough: the root.s rendezvous \\(127\\.0\\.0\\.1:53093, vm pid 6731\\) gave up after 300 ms with 1 of 2 ranks \\(missing 1\\); rank 1 called init 0\\.90 s after the root gave up, later than NCCLSHIM_RENDEZVOUS_TIMEOUT_MS: raise it" err'
check "rv_slowrank: no 'purposes disagree' after a fallback" eval '! has "purposes disagree" err'
run "$FX/rv_slowrank"
check "rv_slowrank: summary says timed out and who fell back" has '^  id:0xa546f973: decided by root 127\.0\.0\.1:53093 \(0xb1ba53de\), 1 round: passthrough, timed out with 1 of 2 ranks \(missing 1\); rank 1 fell back: rendezvous: connect to the root.s shim'
run --json "$FX/rv_slowrank"
check "rv_slowrank --json: fell_back, missing ranks, the fallback reason" jqt '.communicators[0] | .fell_back and .decision.missing == "1" and .decision.arrived == 1 and (.ranks[1].decision | .by == "this rank (fallback)" and (.fallback | test("Connection refused")))'
run --check "$FX"/rv_slowrank/ncclshim.vm.6733.jsonl
check "rv_slowrank, the late rank alone: its own fallback reason and the fix" has '^PROBLEM id:0xa546f973: decision fell back to passthrough on rank 1 \(vm pid 6733\): rendezvous: connect to the root.s shim at 127\.0\.0\.1:53093: Connection refused .*; the rank got no answer from the root: keep the process that called ncclGetUniqueId alive' err

# rv_duplicate: an intruder took rank 0's place; the root's rejection explains the real rank 0's fallback
run --check "$FX/rv_duplicate"
check "rv_duplicate: fallback with the root's rejection" has '^PROBLEM id:0x583585f7: decision fell back to passthrough on rank 0 \(vm pid 6771\): rendezvous with 127\.0\.0\.1:57735: connection closed by the peer: passthrough; the root \(vm pid 6767\) dropped 1 connection, first: dropped a connection from 127\.0\.0\.1:33868: rank 0 arrived twice' err

# rv_veto: rank 1's NCCL 2.13 cannot take netName: the vote undid socket
run --check "$FX/rv_veto"
check "rv_veto: decision fell back in the vote round, with the rank's reason" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 1 && has "^PROBLEM id:0x021ea999: decision fell back to passthrough in the vote round: rank 1 could not set up socket \\(NCCL 21304 has no ncclConfig_t\\.netName" err'
run "$FX/rv_veto"
check "rv_veto: summary says undone" has '^  id:0x021ea999: decided by root 127\.0\.0\.1:38887 \(0xc23d4947\), 2 rounds: passthrough, undone in the vote round$'

# rv_strict: NCCLSHIM_STRICT=1 and a malformed NCCLSHIM_RULES on rank 1: both inits fail
run --check "$FX/rv_strict"
check "rv_strict: creation failed by policy, naming the malformed setting" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 2 && has "^PROBLEM malformed setting in 1 process \\(vm pid 6795\\): NCCLSHIM_RULES: position 9" err && has "^PROBLEM id:0x286c13f8: creation failed by policy on ranks 0,1: failing the communicator, NCCLSHIM_STRICT=1 and a malformed policy on rank 1 .*; the malformed setting: vm pid 6795: NCCLSHIM_RULES: position 9 .*; fix it, or unset NCCLSHIM_STRICT to fail open \\(passthrough\\)$" err'
check "rv_strict: the row shows action fail" has '^id:0x286c13f8 +weight-update +fail +2/2 '

# rv_idle: an ID nobody used; its listener expired
run --json "$FX/rv_idle"
check "rv_idle --json: the expiry, joined to its ID" jqt '.rendezvous_expired == [{"host":"vm","pid":6784,"listen":"127.0.0.1:58297","id_hash":"0x743a5ebb58b5c8b7","idle_ms":200,"rejected_connections":10}]'
run "$FX/rv_idle"
check "rv_idle: header line" has '^rendezvous vm:6784 127\.0\.0\.1:58297 for ID 0x743a5ebb58b5c8b7 expired: no rank came within 200 ms \(NCCLSHIM_RENDEZVOUS_IDLE_MS\), 10 connections rejected$'
# a rank that came after the expiry (rv_slowrank's late rank, moved onto the idle ID)
sed -e 's/0xa546f9736a8a6c4d/0x743a5ebb58b5c8b7/g' -e 's/127\.0\.0\.1:53093/127.0.0.1:58297/g' \
  "$FX"/rv_slowrank/ncclshim.vm.6733.jsonl >"$TMP/late.jsonl"
run --check "$FX/rv_idle" "$TMP/late.jsonl"
check "expired listener: the fallback names NCCLSHIM_RENDEZVOUS_IDLE_MS" has '^PROBLEM id:0x743a5ebb: decision fell back to passthrough on rank 1 \(vm pid 6733\): .*; the root.s listener 127\.0\.0\.1:58297 expired after 200 ms unused \(NCCLSHIM_RENDEZVOUS_IDLE_MS\)' err

# malformed new record content is reported and skipped like any other
{ echo '{"type":"comm","ts":1.0,"host":"z","pid":1,"tid":1,"group":"id:0x1","rank":0,"nranks":1,"decision":"root"}'
  echo '{"type":"comm","ts":1.0,"host":"z","pid":1,"tid":1,"group":"id:0x1","rank":0,"nranks":1,"decision":{"rounds":"two"}}'
  echo '{"type":"decision","ts":1.0,"host":"z","pid":1,"tid":2,"stage":"commit"}'
  echo '{"type":"decision","ts":1.0,"host":"z","pid":1,"tid":2,"decision_id":"0x5","ranks":{}}'
  echo '{"type":"decision","ts":1.0,"host":"z","pid":1,"tid":2,"decision_id":"0x5","ranks":[1]}'
  echo '{"type":"decision","ts":1.0,"host":"z","pid":1,"tid":2,"decision_id":"0x5","missing":"1-","ranks":[{"rank":"0"}]}'
  echo '{"type":"rendezvous_expired","ts":1.0,"host":"z","pid":1,"tid":2,"listen":5}'
  echo '{"type":"comm_end","ts":2.0,"host":"z","pid":1,"tid":1,"group":"id:0x1","rank":0,"action":3}'
  echo '{"type":"unique_id","ts":1.0,"host":"z","pid":1,"tid":1,"id_hash":"0x1","rendezvous":["a"]}'
  echo '{"type":"decision","ts":1.0,"host":"z","pid":1,"tid":2,"decision_id":"0x5","nranks":3,"arrived":1,"missing":"1-x,9999999999999999999","ranks":[]}'
  echo '{"type":"comm","ts":1.0,"host":"z","pid":1,"tid":1,"group":"id:0x1","rank":0,"nranks":3,"decision":{"by":"root","id":"0x5"}}'
} >"$TMP/ncclshim.z.1.jsonl"
run --check --json "$TMP/ncclshim.z.1.jsonl"
check "bad new fields: 9 lines reported on one line with the field, the first five named" eval 'test $rc -eq 1 && test $(grep -c "bad line" "$TMP/err") -eq 2 && has "ncclshim\\.z\\.1\\.jsonl: 9 bad lines skipped: line 1: field .decision. is a string, expected an object; line 2: field .decision\\.rounds. is a string, expected an integer; line 3: missing field .decision_id. \\(a string\\); line 4: field .ranks. is an object, expected an array of objects; line 5: field .ranks\\[\\]. is an integer, expected an object; and 4 more\$" err && has "^PROBLEM input .*ncclshim\\.z\\.1\\.jsonl: 9 bad lines skipped, the first at line 1\$" err'
sed -n '6,9p' "$TMP/ncclshim.z.1.jsonl" > "$TMP/ncclshim.z.2.jsonl"
run "$TMP/ncclshim.z.2.jsonl"
check "bad new fields: the other four, each named with the field" has "ncclshim\\.z\\.2\\.jsonl: 4 bad lines skipped: line 1: field .ranks\\[\\]\\.rank. is a string, expected an integer; line 2: field .listen. is an integer, expected a string; line 3: field .action. is an integer, expected a string; line 4: field .rendezvous. is an array, expected a string\$" err
run --check --json "$TMP/ncclshim.z.1.jsonl"
check "bad new fields: the valid decision still joins, junk in 'missing' is harmless" jqt '(.input_errors | length) == 6 and .communicators[0].decision.decision_id == "0x5" and .communicators[0].fell_back'

# --- ipc communicators (real records of tests/t/13-rendezvous.t: the shim's CUDA IPC transport, no NCCL)
# rv_ipc2: a clean run; rank 1's shim warns ipc-peer-lost after its own destroy (the teardown)
run --check "$FX/rv_ipc2"
check "rv_ipc2: a clean ipc run passes --check" eval 'test $rc -eq 0 && ! has PROBLEM err'
check "rv_ipc2: row shows action ipc, NET ipc, traffic from comm_end" has '^id:0x474f4f50 +weight-update +ipc +2/2 +vm +other +0 +ipc +- +AllGather:4/20Ki AllReduce:8/58B Bcast:10/243Ki Broadcast:10/243Ki Recv:3/293Ki Send:3/293Ki$'
check "rv_ipc2: decided in 3 rounds" has '^  id:0x474f4f50: decided by root 127\.0\.0\.1:40957 \(0xc3209675\), 3 rounds: ipc$'
check "rv_ipc2: the teardown warning is joined and marked after the rank's end" has '^warning vm:32722 ipc-peer-lost \(id:0x474f4f50 rank 1, after its end\): ipc communicator \(rank 1 of 2\)'
check "rv_ipc2: how the broadcasts went, each hop once, staged explained" has "^  id:0x474f4f50: 14 hops: 0 pushed, 0 pulled, 14 staged \\(a buffer that could not be exported, e.g. cuMemCreate memory without a file descriptor handle"
run --json "$FX/rv_ipc2"
check "rv_ipc2 --json: ipc_hops per communicator, comm_end's ipc per rank" jqt '.communicators[0].ipc_hops == {"push":0,"pull":0,"staged":14} and .communicators[0].ranks[0].ipc == {"first":8,"in":{"push":0,"pull":0,"staged":7},"out":{"push":0,"pull":0,"staged":7}} and .communicators[0].ranks[1].ipc.first == 6'
check "rv_ipc2 --json: no NCCL pointer, the shim's handle, ops from comm_end" jqt '.communicators[0] | .action == "ipc" and .network == "ipc" and .ipc_peer_lost == false and .problems == [] and ([.ranks[] | [.comm, .handle, .["end"], .end_action]] == [[null,"0x7fa788000d00","destroy","ipc"],[null,"0x7fa144000d40","destroy","ipc"]]) and .ranks[0].ops.Send.count == 2 and .ranks[1].network == null and .ranks[0].decision.rounds == 3'
check "rv_ipc2 --json: the warning names its communicator and rank" jqt '.warnings == [.warnings[0]] and (.warnings[0] | .what == "ipc-peer-lost" and .group == "id:0x474f4f501ab0b57b" and .rank == 1 and .after_end == true and .ts > 0)'
run -v "$FX/rv_ipc2"
check "rv_ipc2 -v: no comm pointer, the handle instead" has '^  rank 0: vm pid 32719 tid 32721 comm - handle 0x7fa788000d00 api other '
check "rv_ipc2 -v: each rank's hops" eval "test \$(grep -cE '^          ipc: in push 0, pull 0, staged 7; out push 0, pull 0, staged 7; came first on [86]\$' $TMP/out) -eq 2"
check "rv_ipc2 -v: the rank's ipc warning under it" has '^          warning ipc-peer-lost \(after this rank.s comm_end: its destroy.s teardown\): ipc communicator \(rank 1 of 2\)'
# rv_ipc2_vmm: the same records with comm_end's ipc.vmm (cuMemCreate pieces shared as file
# descriptors, and why such memory was staged)
run "$FX/rv_ipc2_vmm"
check "rv_ipc2_vmm: the pieces shared and the first rank's reason under the hops" has '^    cuMemCreate memory \(expandable segments\) shared as file descriptors: 2 pieces sent, 0 mapped; staged: a buffer at 0x7f2c00000000 is cuMemCreate memory that cannot be exported'
run -v "$FX/rv_ipc2_vmm"
check "rv_ipc2_vmm -v: each rank's line, the reason only where there is one" eval "grep -q '^          ipc cuMemCreate memory: 0 pieces sent, 0 mapped; staged: a buffer at' $TMP/out && grep -q '^          ipc cuMemCreate memory: 2 pieces sent, 0 mapped\$' $TMP/out"
run --json "$FX/rv_ipc2_vmm"
check "rv_ipc2_vmm --json: each rank's ipc.vmm as the shim wrote it" jqt '.communicators[0].ranks[0].ipc.vmm.pieces_sent == 0 and (.communicators[0].ranks[0].ipc.vmm.note | startswith("a buffer at")) and .communicators[0].ranks[1].ipc.vmm == {"pieces_sent":2,"pieces_mapped":0}'
run "$FX/rv_ipc2"
check "rv_ipc2: older records (no ipc.vmm) print no such line" eval "! grep -q 'cuMemCreate memory (expandable' $TMP/out"
# rv_ipc4: at the destroy the root records rank 3 leaving, two ranks warn after their end
run --check "$FX/rv_ipc4"
check "rv_ipc4: a normal destroy with ipc_peer_left passes --check" eval 'test $rc -eq 0 && ! has PROBLEM err'
check "rv_ipc4: ipc_peer_left joined by decision_id and shown" has '^  id:0x5c0ca8af: decided by root 127\.0\.0\.1:46433 \(0xa55ec81f\), 3 rounds: ipc; the root saw rank 3 leave at its destroy \(ipc_peer_left\)$'
run --json "$FX/rv_ipc4"
check "rv_ipc4 --json: ipc_peer_left on the communicator and at the top" jqt '.communicators[0].ipc_peer_left == [{"host":"vm","pid":32726,"ts":1795269132.671824,"listen":"127.0.0.1:46433","decision_id":"0xa55ec81f748616a5","rank":3,"group":"id:0x5c0ca8afc9d2cb3a","at_destroy":true}] and .ipc_peer_left == .communicators[0].ipc_peer_left and ([.warnings[].after_end] == [true,true])'
# rv_ipc8, rv_ipc_concurrent: 4 ipc communicators per process with the same rank numbers
run --check "$FX/rv_ipc_concurrent"
check "rv_ipc_concurrent: 4 communicators, all clean" eval 'test $rc -eq 0 && test $(grep -cE "^id:0x[0-9a-f]+ .* ipc +2/2 " "$TMP/out") -eq 4'
# a teardown warning of one (after its root saw a rank leave) must not be taken for a loss on another, still alive
cp "$FX"/rv_ipc_concurrent/*.jsonl "$TMP/"; mkdir -p "$TMP/conc"; mv "$TMP"/ncclshim.vm.*.jsonl "$TMP/conc/"
echo '{"type":"warning","ts":1795269132.737800,"host":"vm","pid":302,"tid":9,"what":"ipc-peer-lost","message":"ipc communicator (rank 1 of 2): a rank of this communicator is gone (the root'"'"'s shim closed the connection: a process exited or was killed); its operations now fail with ncclRemoteError"}' >>"$TMP/conc/ncclshim.vm.302.jsonl"
run --check --json "$TMP/conc"
check "concurrent ipc comms: a teardown warning joins the one whose root just saw a rank leave" jqt '(.warnings[-1] | .group == "id:0x6b8ff46875dc06fe" and .after_end == true) and ([.communicators[].problems | length] == [0,0,0,0])'

# rv_ipc_dead_peer: rank 1 exits right after init; the root saw it leave, rank 0 lost it mid-transfer
run --check "$FX/rv_ipc_dead_peer"
check "rv_ipc_dead_peer: ipc peer lost names the rank, how it ended, who saw it, and the fix" has '^PROBLEM id:0xa3f9e387: ipc peer lost: rank 1 \(vm pid 327\) left while the communicator ran: no end record, so its process died or was killed \(the OOM killer, a signal, the job scheduler\); the root \(vm pid 324\) saw rank 1 leave \(ipc_peer_left\); rank 0 lost its peer \(ipc-peer-lost\), 1 operation failed with ncclRemoteError after that \(first: ncclBroadcast on rank 0\): the transfer in flight, and whatever the communicator moved after that, is not valid; find why that process ended \(its log, the kernel log, the scheduler\); then destroy or abort the communicator on every surviving rank \(their calls returned, with ncclRemoteError\), start a process in the lost rank.s place, and create a new communicator with a new unique ID to redo the transfer$' err
check "rv_ipc_dead_peer: the failed broadcast is part of it, not a problem of its own; 2 problems in all" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 2 && has "^PROBLEM id:0xa3f9e387: rank 1 \\(pid 327\\) has no end record" err && ! has "ipc operation failed" err'
check "rv_ipc_dead_peer: the decisions line says the rank left while it ran" has '^  id:0xa3f9e387: decided by root 127\.0\.0\.1:41721 \(0xd7927791\), 3 rounds: ipc; the root saw rank 1 leave while it ran \(ipc_peer_left\)$'
run --json "$FX/rv_ipc_dead_peer"
check "rv_ipc_dead_peer --json: ipc_peer_lost, ipc_peer_left not at a destroy" jqt '.communicators[0] | .ipc_peer_lost == true and .ipc_peer_left[0].rank == 1 and .ipc_peer_left[0].at_destroy == false and (.problems | length) == 2'
# only the survivor's records: the rank that left is known from the root's record alone
run --check "$FX/rv_ipc_dead_peer/ncclshim.vm.324.jsonl"
check "dead peer, survivor's records only: the root's ipc_peer_left names the rank" has '^PROBLEM id:0xa3f9e387: ipc peer lost: rank 1 left while the communicator ran; the root \(vm pid 324\) saw rank 1 leave \(ipc_peer_left\); rank 0 lost its peer .*; find why that rank.s process ended' err
# rv_ipc2 with rank 1 exiting without a destroy (comm_end how exit)
mkdir -p "$TMP/ipcexit"; cp "$FX"/rv_ipc2/*.jsonl "$TMP/ipcexit/"
sed -i 's/"how":"destroy"/"how":"exit"/' "$TMP/ipcexit/ncclshim.vm.32722.jsonl"
run --check "$TMP/ipcexit"
check "ipc rank exited without destroy: ipc peer lost, fix: destroy before exit" has '^PROBLEM id:0x474f4f50: ipc peer lost: rank 1 \(vm pid 32722\) left while the communicator ran: its process exited without destroying it \(comm_end how exit\): the transfer in flight, .*; destroy the communicator on every rank before its process exits; then destroy or abort the communicator on every surviving rank' err
# rv_ipc2 with rank 1 still using it after rank 0 destroyed it: rank 1's warning comes before its end
mkdir -p "$TMP/ipcearly"; cp "$FX"/rv_ipc2/*.jsonl "$TMP/ipcearly/"
sed -i 's/"type":"comm_end","ts":1795269132.628220/"type":"comm_end","ts":1795269132.631000/' "$TMP/ipcearly/ncclshim.vm.32722.jsonl"
run --check "$TMP/ipcearly"
check "ipc rank destroyed while another still used it: ipc peer lost names it" has '^PROBLEM id:0x474f4f50: ipc peer lost: rank 0 destroyed the communicator while other ranks still used it; rank 1 lost its peer \(ipc-peer-lost\): .*; destroy an ipc communicator only after every rank.s last operation on it; then destroy or abort' err

# rv_ipc_allapi: every function on an ipc communicator (rank_client allapi=1): unsupported calls, and a Send/Recv that timed out
run --check "$FX/rv_ipc_allapi"
check "rv_ipc_allapi: unsupported operations, one problem naming them, the ranks and the fix" has '^PROBLEM id:0x0405ff5d: unsupported operations on an ipc communicator: ncclCommWindowRegister,ncclCommWindowDeregister,ncclReduce,.*,\.\.\. \(12 functions\) on ranks 0,1 \(first: vm pid 6030\) returned ncclInvalidUsage: .*pass it through: NCCLSHIM_WEIGHT_UPDATE=passthrough, or an NCCLSHIM_RULES rule with action passthrough for it$' err
check "rv_ipc_allapi: ipc operation failed, with the function, result, reason and cause" has '^PROBLEM id:0x0405ff5d: ipc operation failed: ncclGroupEnd \(Send/Recv\) returned 1 \(ncclUnhandledCudaError\) on rank 1 \(vm pid 6032\): cuStreamWaitValue64: CUresult 702 \(the launch timed out and was terminated\); a stream wait for a peer timed out: the peers did not issue the matching operation' err
check "rv_ipc_allapi: just those 2 problems" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 2'
# the same failure three times, and an all-reduce over the staging size (its reason says the fix)
mkdir -p "$TMP/ipcfail"; cp "$FX"/rv_ipc2/*.jsonl "$TMP/ipcfail/"
for t in 1 2 3; do echo '{"type":"warning","ts":1795269132.62'$t',"host":"vm","pid":32719,"tid":32721,"what":"ipc","message":"ncclBroadcast on ipc communicator id:0x474f4f501ab0b57b (rank 0 of 2) returns 4: NULL buffer"}'; done >>"$TMP/ipcfail/ncclshim.vm.32719.jsonl"
echo '{"type":"warning","ts":1795269132.625,"host":"vm","pid":32722,"tid":32723,"what":"ipc","message":"ncclAllReduce on ipc communicator id:0x474f4f501ab0b57b (rank 1 of 2) returns 5: an ipc communicator reduces on the host, up to its staging size (8192 bytes: NCCLSHIM_IPC_CHUNK_BYTES x NCCLSHIM_IPC_SLOTS); this all-reduce is 1048576 bytes. Weight-update communicators all-reduce one value to warm up; pass this one through (NCCLSHIM_WEIGHT_UPDATE=passthrough) if it needs large all-reduces"}' >>"$TMP/ipcfail/ncclshim.vm.32722.jsonl"
run --check "$TMP/ipcfail"
check "ipc operation failed: repeats counted, invalid argument blamed on the caller" has '^PROBLEM id:0x474f4f50: ipc operation failed: ncclBroadcast returned 4 \(ncclInvalidArgument\) on rank 0 \(vm pid 32719\), 3 times: NULL buffer; the application passed an invalid argument: a bug in the caller$' err
check "ipc operation failed: a reason that names the fix is quoted as is" has '^PROBLEM id:0x474f4f50: ipc operation failed: ncclAllReduce returned 5 \(ncclInvalidUsage\) on rank 1 \(vm pid 32722\): an ipc communicator reduces on the host, up to its staging size .* \(NCCLSHIM_WEIGHT_UPDATE=passthrough\) if it needs large all-reduces$' err

# rv_ipc_veto: cuMemAlloc fails on rank 1: it vetoes ipc, everyone passes through
run --check "$FX/rv_ipc_veto"
check "rv_ipc_veto: the vote undid ipc, with the rank's reason" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 1 && has "^PROBLEM id:0x8bc2efae: decision fell back to passthrough in the vote round: rank 1 could not set up ipc \\(cuMemAlloc: CUresult 2 \\(out of memory\\)\\): passthrough for all" err'
# rv_ipc_2hosts: NCCLSHIM_WEIGHT_UPDATE=ipc, ranks on 2 hosts: the root passes through and says why
run --check -v "$FX/rv_ipc_2hosts"
check "rv_ipc_2hosts: passthrough by the root's choice is no problem, -v gives the reason" eval 'test $rc -eq 0 && has "^id:0x5818ca32 +weight-update +passthrough +2/2 +node0,node1 " && has "action: passthrough \\(ipc chosen .*CUDA IPC needs every rank on one host"'

# ipc_peer_left: malformed, and one whose communicator is not among the inputs
{ echo '{"type":"ipc_peer_left","ts":1.0,"host":"z","pid":1,"tid":2,"listen":"127.0.0.1:1","decision_id":"0x99","rank":"one"}'
  echo '{"type":"ipc_peer_left","ts":1.0,"host":"z","pid":1,"tid":2,"listen":"127.0.0.1:1","rank":1}'
  echo '{"type":"ipc_peer_left","ts":1.0,"host":"z","pid":1,"tid":2,"listen":"127.0.0.1:1","decision_id":"0x99","rank":-1}'
  echo '{"type":"ipc_peer_left","ts":1.0,"host":"z","pid":1,"tid":2,"listen":"127.0.0.1:1","decision_id":"0x0000000000000099","rank":1}'
  echo '{"type":"warning","ts":1.0,"host":"z","pid":1,"tid":2,"what":"ipc-peer-lost","message":"ipc communicator (rank 0 of 2): gone"}'
  echo '{"type":"warning","ts":1.0,"host":"z","pid":1,"tid":2,"what":"ipc","message":"communicator (rank x"}'
} >"$TMP/ncclshim.pl.1.jsonl"
run --check --json "$TMP/ncclshim.pl.1.jsonl"
check "malformed ipc_peer_left: reported with the field, skipped, once; --check counts the file as one problem" eval 'test $rc -eq 1 && test $(wc -l <"$TMP/err") -eq 2 && has "^PROBLEM input .*pl\\.1\\.jsonl: 3 bad lines skipped, the first at line 1\$" err && has ": 3 bad lines skipped: line 1: field .rank. is a string, expected an integer; line 2: missing field .decision_id. \\(a string\\); line 3: field .rank. is negative \\(-1\\)\$" err'
check "unjoined ipc_peer_left and ipc warnings: kept, no communicator" jqt '.ipc_peer_left == [{"host":"z","pid":1,"ts":1.0,"listen":"127.0.0.1:1","decision_id":"0x0000000000000099","rank":1,"group":null,"at_destroy":false}] and ([.warnings[].group] == [null,null])'
run "$TMP/ncclshim.pl.1.jsonl"
check "unjoined ipc_peer_left: a header line" has '^ipc_peer_left z:1 127\.0\.0\.1:1 \(0x00000000\): rank 1 left; no rank of it in the inputs$'

# --- the scenario's runs (tools/scenario) with the EFASim net plugin: synthetic NCCL 2.28.9
# logs and records from tests/inspect/gen_efasim_fixtures.py
run --check "$FX/efasim_noshim"
check "efasim no shim: communicators from NCCL's logs alone, in creation order" eval 'has "^3 processes on 1 host, 2 communicators$" && has "^nccl:0x5eed0000 +- +- +3/3 +gpu1 +- +0 +EFASim +- +-$" && has "^nccl:0x7a1200b0 +- +- +2/2 +gpu1 +- +0 +Socket +1 +-$" && test "$(grep -m1 -o "^nccl:0x[0-9a-f]*" "$TMP/out")" = nccl:0x5eed0000'
check "efasim no shim: --check flags the fallback, naming both communicators" eval 'test $rc -eq 1 && has "^PROBLEM nccl:0x7a1200b0: fell back to Socket on ranks 0,1 \(gpu1 pid 4100, \.\.\.\): the fabric \(EFASim\) was available to other communicators on its host, nccl:0x5eed0000 \(ranks 0,1,2 on EFASim\).*Failed to initialize NET plugin EFASim" err && test "$(wc -l <"$TMP/err")" -eq 1'
run --json "$FX/efasim_noshim"
check "efasim no shim --json: ranks from the log, commId, network, failed plugin" jqt '(.communicators | map(.group)) == ["nccl:0x5eed0000a11ce001","nccl:0x7a1200b0b0000002"] and ([.communicators[1].ranks[] | [.rank, .network, .net_failed, .from_nccl_log, .nccl_comm_id, .fn]] == [[0,"Socket","EFASim",true,"0x7a1200b0b0000002","ncclCommInitRankConfig"],[1,"Socket","EFASim",true,"0x7a1200b0b0000002","ncclCommInitRankConfig"]]) and .communicators[0].network == "EFASim" and (.processes | length) == 3'
run -v "$FX/efasim_noshim"
check "efasim no shim -v: log-only ranks say so" has '^  rank 0: gpu1 pid 4100 tid 4100 comm 0x55d0b0001000 \(NCCL log only: no shim record\) ncclCommInitRankConfig net Socket, after NCCL failed to initialize NET plugin EFASim$'
run --check "$FX/efasim_passthrough"
check "efasim passthrough (shim records): the weight-update comm on EFASim, training on Socket" eval 'has "^id:0x3c0ffee1 +weight-update +passthrough +3/3 .* EFASim +- " && has "^id:0x9a1bed22 +training +passthrough +2/2 .* Socket +2 "'
check "efasim passthrough: --check flags both rules, naming the weight-update comm" eval 'test $rc -eq 1 && has "^PROBLEM id:0x9a1bed22: training communicator on Socket \(NCCL log, ranks 0,1\)$" err && has "^PROBLEM id:0x9a1bed22: fell back to Socket on ranks 0,1 .*id:0x3c0ffee1 \(ranks 0,1,2 on EFASim\)" err && test "$(wc -l <"$TMP/err")" -eq 2'
# frugal (the weight-update comm of efasim_passthrough made frugal): one rank's NCCL took 4 channels
mkdir -p "$TMP/frugal"; cp "$FX"/efasim_passthrough/* "$TMP/frugal/"
sed -i '/"group":"id:0x3c0ffee1000000a1"/s/"action":"passthrough"/"action":"frugal"/' "$TMP"/frugal/ncclshim.*.jsonl
sed -i '/comm 0x55d0a0003000 .* Init START/a gpu1:4102:4102 [2] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 1 p2p channels per peer' "$TMP/frugal/nccl.gpu1.4102.log"
run --check "$TMP/frugal"
check "frugal: --check says rank 2's NCCL took 4 channels, and what overrides the config" has '^PROBLEM id:0x3c0ffee1: frugal ineffective on rank 2: NCCL took up to 4 channels where the shim told it 1 \(NCCL log\); NCCL_MIN_NCHANNELS or NCCL_MIN_CTAS' err
run --json "$TMP/frugal"
check "frugal --json: rank 2's nccl_coll_channels is 4" jqt '[.communicators[] | select(.group == "id:0x3c0ffee1000000a1") | .ranks[] | select(.rank == 2) | .nccl_coll_channels] == [4]'
run --check "$FX/efasim_ipc"
check "efasim ipc: training on EFASim, --check passes" eval 'test $rc -eq 0 && test ! -s "$TMP/err" && has "^id:0x3c0ffee1 +weight-update +ipc +3/3 .* ipc +- " && has "^id:0x9a1bed22 +training +passthrough +2/2 .* EFASim +- "'
run --check "$FX/efasim_socket"
check "efasim socket by policy (inference as node-b): no problem, --check passes" eval 'test $rc -eq 0 && test ! -s "$TMP/err" && has "^3 processes on 2 hosts, 2 communicators$" && has "^id:0x3c0ffee1 +weight-update +socket +3/3 +gpu1,node-b +ctypes .* Socket +- " && has "^id:0x9a1bed22 +training +passthrough +2/2 .* EFASim +- "'
run --json "$FX/efasim_socket"
check "efasim socket: NCCLSHIM_HOSTNAME's rank joins NCCL's log by pid and comm" jqt '[.communicators[0].ranks[] | [.host, .network, .from_nccl_log]] == [["gpu1","Socket",false],["gpu1","Socket",false],["node-b","Socket",false]]'
# a rank without the shim beside shim ranks: joins the shim's group through NCCL's commId
mkdir -p "$TMP/mixed"
cp "$FX"/efasim_passthrough/* "$TMP/mixed/"
rm "$TMP/mixed/ncclshim.gpu1.4102.jsonl"
run --json "$TMP/mixed"
check "rank without the shim: joins the shim's group through NCCL's commId" jqt '(.communicators | length) == 2 and ([.communicators[0].ranks[] | [.rank, .from_nccl_log, .network]] == [[0,false,"EFASim"],[1,false,"EFASim"],[2,true,"EFASim"]]) and .communicators[0].purpose == "weight-update" and .communicators[0].problems == []'

# one library reached by two paths (an rpath of $ORIGIN/.., a plain path) is one line
mkdir -p "$TMP/twopaths"
cp "$FX"/healthy/* "$TMP/twopaths/"
sed -i 's|"path":"/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"|"path":"/opt/venv/lib/python3.12/site-packages/torch/lib/../../nvidia/nccl/lib/./libnccl.so.2"|' \
    "$TMP/twopaths/ncclshim.vm.734.jsonl"
run "$TMP/twopaths"
check "one library by two paths: listed once" eval 'test "$(grep -c "^library slot" "$TMP/out")" -eq 1 && has "^library slot 0: /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2 \(version 2\.28\.9, 4 processes\)$"'

# --- --check on inputs that are not what CI meant to check (issue 32)
mkdir -p "$TMP/emptydir"
run --check "$TMP/emptydir"
check "--check on an empty records directory: exit 1, says there is nothing to check" eval 'test $rc -eq 1 && has "^PROBLEM no records to check: " err'
mkdir -p "$TMP/notrec"
printf 'this is not a record\n{"half":\n' > "$TMP/notrec/ncclshim.vm.1.jsonl"
printf '{"type":"load","ts":1.0,"host":"vm","pid":2,"tid":2}\n[1,2]\n' > "$TMP/notrec/ncclshim.vm.2.jsonl"
run --check "$TMP/notrec"
check "--check on a records file that is not records: exit 1, each file named once as a problem" eval 'test $rc -eq 1 && has "^PROBLEM input .*ncclshim.vm.1.jsonl: 2 bad lines skipped, the first at line 1\$" err && has "^PROBLEM input .*ncclshim.vm.2.jsonl: 1 bad line skipped, the first at line 2\$" err && has "ncclshim.vm.2.jsonl: 1 bad line skipped: line 2: record is an array" err && test $(grep -c "record is an array" "$TMP/err") -eq 1'
printf '{"type":"load","ts":1.0,"host":"vm","pid":3,"tid":3}\n{"type":"warning","ts":1.0,"host":"vm","pid":3,"tid":3,"what":"bad-setting","message":"NCCLSHIM_RULES: unknown action" }\n' > "$TMP/bad.jsonl"
run --check "$TMP/bad.jsonl"
check "--check with a malformed setting in a process: exit 1, names it" eval 'test $rc -eq 1 && has "^PROBLEM malformed setting in 1 process \(vm pid 3\): NCCLSHIM_RULES: unknown action" err'

# --- NCCL 2.32's ATTN lines (a configuration fallback, a NET plugin that failed to initialize);
# their exact shape is not known (no 2.32 source): read like WARN's, with or without file:line
run --check "$FX/nccl232_attn"
check "ATTN: --check exits 1 on a configuration fallback" eval 'test $rc -eq 1 && has "^PROBLEM id:0x01234567: NCCL ATTN \(p pid 50\): Configuration fallback: NVLS is not supported" err'
check "ATTN: and on a NET plugin that failed to initialize (no file:line before the level)" has '^PROBLEM id:0x01234567: NCCL ATTN \(p pid 51\): Failed to initialize NET plugin AWS Libfabric' err
check "ATTN: those two problems only" test "$(wc -l <"$TMP/err")" -eq 2
run --json "$FX/nccl232_attn"
check "ATTN --json: in the communicator's problems" jqt '[.communicators[0].problems[] | select(startswith("NCCL ATTN"))] | length == 2'
# efasim_noshim as 2.32 logs it: the plugin's refusal as ATTN still explains the fallback to Socket
mkdir -p "$TMP/attn_efasim"
for f in "$FX"/efasim_noshim/*.log; do sed 's/ NCCL INFO Failed to initialize NET plugin/ NCCL ATTN Failed to initialize NET plugin/' "$f" > "$TMP/attn_efasim/${f##*/}"; done
run --check "$TMP/attn_efasim"
check "ATTN: a plugin's refusal logged as ATTN names the fabric in 'fell back to Socket', and is a problem itself" eval 'test $rc -eq 1 && has "^PROBLEM nccl:0x7a1200b0: fell back to Socket on ranks 0,1 .*Failed to initialize NET plugin EFASim" err && has "^PROBLEM nccl:0x7a1200b0: NCCL ATTN \(gpu1 pid 4100\): Failed to initialize NET plugin EFASim" err'
# --- one process that makes and destroys a communicator per refit, NCCL reusing 3 comm
# pointers and 5 handles (bench/inspect_scale.py): every rank joins its own end (the k-th
# destroy carried 1 + k % 40 broadcasts), in file order or reversed
python3 bench/inspect_scale.py "$TMP/refits" --mb 0.3 >/dev/null
run --json "$TMP/refits"
check "refits: each of 108 ranks joined its own comm_end, though addresses are reused" jqt '[.communicators[] | .ranks[0] | [.end, .ops.Broadcast.count]] == [range(108) | ["destroy", 1 + . % 40]]'
tac "$TMP"/refits/*.jsonl >"$TMP/refits-reversed.jsonl"
run --json "$TMP/refits-reversed.jsonl"
check "refits: the same with the records in reverse order (joined by time, not by position)" jqt '[.communicators[] | .ranks[0] | [.end, .ops.Broadcast.count]] == [range(108) | ["destroy", 1 + . % 40]]'

# --- usage
run
check "no input: usage error, exit 2" eval 'test $rc -eq 2 && has "^usage: ncclshim-inspect" err'
run --bogus "$FX/healthy"
check "unknown option: exit 2" test "$rc" -eq 2
