#!/usr/bin/env bash
# The record schema (docs/records.md, "Every key") against the code: every key
# the shim writes is in the table, every row is written, every key
# ncclshim-inspect reads and every key the page describes is written
# (tests/schema/record_keys.py).  Then the checker on copies of the tree with
# one fault each, so that it is known to catch what it claims to.
source "$(dirname "$0")/../tap.sh"
command -v python3 > /dev/null || skip_all "python3 not found"
CHECK=$ROOT/tests/schema/record_keys.py

# The tree itself: each of the checker's results, with its detail on failure.
out=$(tap_run 60 python3 "$CHECK" "$ROOT" 2>&1)
n=0
while IFS= read -r line; do
    n=$((n + 1))
    case $line in
        "ok "*) ok 0 "the tree: ${line#ok * - }" ;;
        *) ok 1 "the tree: ${line#not ok * - }"
           echo "$out" | awk -v n="$n" '$0 ~ "^not ok " n " " {on = 1; next} /^(not )?ok / {on = 0} on' ;;
    esac
done < <(echo "$out" | grep -E '^(not )?ok ')
[ "$n" -ge 6 ] || { ok 1 "the checker ran ($n results)"; echo "$out" | sed 's/^/# /'; }

# A copy of what the checker reads, for one fault.
copy() {
    rm -rf "$TMP/t"
    mkdir -p "$TMP/t/docs" "$TMP/t/tools"
    cp -r "$ROOT/shim" "$TMP/t/shim"
    cp -r "$ROOT/tools/inspect" "$TMP/t/tools/inspect"
    cp "$ROOT/docs/records.md" "$TMP/t/docs/records.md"
}
# fails_with <n> <text> <description>: the checker, on the copy, fails its
# check n, and that check's detail holds text.
fails_with() {
    local got detail
    got=$(tap_run 60 python3 "$CHECK" "$TMP/t" 2>&1)
    detail=$(echo "$got" | awk -v n="$1" '$0 ~ "^not ok " n " " {on = 1; next} /^(not )?ok / {on = 0} on')
    if echo "$got" | grep -q "^not ok $1 " && echo "$detail" | grep -qF -- "$2"; then
        ok 0 "$3"
    else
        ok 1 "$3"
        echo "$got" | sed 's/^/# /'
    fi
}
# passes <text> <description>: the checker, on the copy, does not name text.
passes() {
    local got
    got=$(tap_run 60 python3 "$CHECK" "$TMP/t" 2>&1)
    if echo "$got" | grep -qF -- "$1"; then ok 1 "$2"; echo "$got" | sed 's/^/# /'; else ok 0 "$2"; fi
}
RECORD=shim/comm/comm_record.c
READER=tools/inspect/read_records.c
DOC=docs/records.md

copy
sed -i '0,/jw_str(w, "net_by", net_by);/s//jw_str(w, "net_by", net_by);\n        jw_str(w,\n               "brand_new_key", net_by);/' "$TMP/t/$RECORD"
fails_with 2 "brand_new_key (written in $RECORD)" "a key written (across lines) but not in the table fails"

copy
sed -i '/^| `lifetime_us` |/d' "$TMP/t/$DOC"
fails_with 2 "lifetime_us (written in shim/rendezvous/rv_leader.c)" "a row removed from the table fails"

copy
sed -i '/^| `lifetime_us` |/s|`shim/rendezvous/rv_leader.c`|`shim/rendezvous/rv_session.c`|' "$TMP/t/$DOC"
fails_with 2 "lifetime_us (written in shim/rendezvous/rv_leader.c)" "a key written by a file its row does not name fails"

copy
echo '| `never_written` | comm | `shim/comm/comm_record.c` | |' >> "$TMP/t/$DOC"
fails_with 4 "records.md: never_written" "a row that nothing writes fails"

copy
sed -i '0,/record_two(w, "copy", "sm"/s//record_two(w, "copy", "sm_copies"/' "$TMP/t/$RECORD"
fails_with 2 "sm_copies (written in $RECORD)" "a key passed to a helper that writes it is found at the helper's caller"

copy
sed -i '0,/jw_u64(w, ipc_hop_names\[k\]/s//jw_u64(w, hop_label[k]/' "$TMP/t/$RECORD"
fails_with 3 "$RECORD: key \`hop_label[k]\`" "a key from a variable that no family names fails"

copy
sed -i '/^| `<hop>` |/s|`ipc_hop_names`$|`hop_names_gone`|; /^| `<hop>` |/s|`ipc_hop_names` |`hop_names_gone` |' "$TMP/t/$DOC"
fails_with 4 "no names of hop_names_gone" "a family whose list of names is not in the file it names fails"

copy
sed -i 's/"staged" }/"staged", "bounced" }/' "$TMP/t/shim/ipc/ipc_bcast.c"
sed -i '0,/get_int(c, o, "first"/s//get_int(c, o, "bounced"/' "$TMP/t/$READER"
grep -q '"bounced" }' "$TMP/t/shim/ipc/ipc_bcast.c" && grep -q 'get_int(c, o, "bounced"' "$TMP/t/$READER"
ok $? "the copy's inspect reads a name the copy's hop list has"
passes "bounced (read in" "a key of a family (an array's names) counts as written"

copy
sed -i '0,/get_str(c, o, "net_by", 0)/s//get_str(c, o,\n                    "net_by_v2", 0)/' "$TMP/t/$READER"
fails_with 5 "net_by_v2 (read in $READER)" "a key inspect reads (across lines) that nothing writes fails"

copy
sed -i 's/"idle_ms":200/"idle_ms":200,"idle_left_ms":3/' "$TMP/t/$DOC"
fails_with 6 "idle_left_ms" "a key of an example that nothing writes fails"

copy
sed -i 's/^| `turned_away` | ranks it told/| `turned_away`, `sent_back` | ranks it told/' "$TMP/t/$DOC"
fails_with 6 "sent_back" "a key a record's table describes that nothing writes fails"

copy
sed -i 's|/\* "rejected_by": {cause: count}|/* jw_str(w, "in_a_comment", x); "rejected_by": {cause: count}|' "$TMP/t/shim/rendezvous/rv_server_record.c"
grep -q in_a_comment "$TMP/t/shim/rendezvous/rv_server_record.c"
ok $? "the copy has a jw_ call in a comment"
passes "in_a_comment" "a jw_ call in a comment is no key"

done_testing
