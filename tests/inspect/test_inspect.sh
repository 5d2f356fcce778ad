#!/usr/bin/env bash
# TAP tests for ncclshim-inspect. Run from anywhere: prove -v tests/inspect/test_inspect.sh
# $INSPECT overrides the binary (e.g. an ASan build); $INSPECT_WRAP prefixes every
# run (e.g. "valgrind --leak-check=full --error-exitcode=9 -q").
set -u
cd "$(dirname "$0")/../.." || exit 1
INSPECT=${INSPECT:-tools/ncclshim-inspect}
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

echo "1..56"

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
check "bad: 13 diagnostics on stderr" test "$(wc -l <"$TMP/err")" -eq 13
check "bad: input_errors has the same 13" jqt '(.input_errors | length) == 13'
B="$TMP/bad/ncclshim"
check "bad: invalid JSON with file:line" has "^$B\\.x\\.7\\.jsonl:2: invalid JSON: " err
check "bad: non-object line" has "^$B\\.x\\.7\\.jsonl:3: record is an array, not a JSON object$" err
check "bad: type not a string" has "^$B\\.x\\.7\\.jsonl:4: field 'type' is an integer, expected a string$" err
check "bad: missing type, wrong-typed pid" eval "has '^$B\\.x\\.7\\.jsonl:5: record has no .type.\$' err && has '^$B\\.x\\.7\\.jsonl:6: field .pid. is a string, expected an integer\$' err"
check "bad: truncated last line" has "^$B\\.x\\.8\\.jsonl:3: truncated last line \\(no newline\\): invalid JSON" err
check "bad: 2 MiB line reported and skipped, following line kept" eval "has '^$B\\.y\\.9\\.jsonl:2: line longer than 1048576 bytes \\(2097[0-9]+\\), skipped\$' err && jqt '.warnings == [{\"host\":\"y\",\"pid\":9,\"what\":\"bad-setting\",\"message\":\"after the huge line\"}]'"
check "bad: binary garbage in a record file: 2 lines reported" test "$(grep -c "^$B\\.g\\.1\\.jsonl:[12]: invalid JSON" "$TMP/err")" -eq 2
check "bad: empty file, garbage log, missing path, empty dir" eval "has '^$B\\.e\\.1\\.jsonl: empty file' err && has '^$TMP/garbage.bin: no NCCL log lines found' err && has '^$TMP/does-not-exist: cannot read: No such file or directory\$' err && has '^$TMP/emptydir: no ncclshim' err"
check "bad: the valid records are all kept" jqt '(.processes | length) == 3 and (.communicators | length) == 1 and .communicators[0].ranks_seen == 1 and .communicators[0].problems == []'
run --check "$TMP/does-not-exist" "$FX/dropped"
check "bad: --check problems win over unreadable input (exit 1)" test "$rc" -eq 1

# --- real records and NCCL logs from the GPU machine (2x H200, one host, torch + ctypes)
run --check "$FX/gpu_single_host"
check "one host, NCCL names Socket but no channel crosses it: no problem" test "$rc" -eq 0
run --json "$FX/gpu_single_host"
check "real run: torch comm is training on Socket, both ranks joined to NCCL's log" jqt '.communicators[0] | .purpose == "training" and .apis == ["torch"] and ([.ranks[].network] == ["Socket","Socket"])'
check "real run: the ctypes comm's traffic" jqt '.communicators[1] | .apis == ["ctypes"] and .ops.Broadcast.count == 2 and .ops.AllReduce.count == 2'

# --- usage
run
check "no input: usage error, exit 2" eval 'test $rc -eq 2 && has "^usage: ncclshim-inspect" err'
run --bogus "$FX/healthy"
check "unknown option: exit 2" test "$rc" -eq 2
