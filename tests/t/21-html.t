#!/bin/bash
# ncclshim-inspect --html: the report of the CPU demo's records (tools/demo.sh without
# GPUs), and of fixtures with each kind of problem, loaded in Debian's headless chromium:
# the page's own checks (it writes "ncclshim report: ok" into its title, or FAILED and
# why), a screenshot that is not blank, and problems marked where they happened.  The
# page must need nothing from the network and survive hostile strings in the records.
source "$(dirname "$0")/../tap.sh"
skip_emulated "its records are the CPU demo's, whose clients are Python ctypes ones that the host's python3 cannot run with the aarch64 library (tests/inspect/test_inspect.sh runs the aarch64 tool)"
[ -x "$INSPECT" ] || skip_all "tools/ncclshim-inspect not built (make all)"
FIX=$ROOT/tests/inspect/fixtures

# 1. The demo's records and the report, without a browser.
DEMO_SHIM=$SHIM DEMO_CPU=1 DEMO_DIR=$TMP/demo tap_run 150 "$ROOT/tools/demo.sh" > "$TMP/demo.out" 2>&1
st=$?
is "$st" 0 "the CPU demo ran (exit $st)"
[ "$st" -eq 0 ] || tail -20 "$TMP/demo.out" | sed 's/^/# /'
like "$(cat "$TMP/demo.out")" "a picture of what happened: $TMP/demo/report.html" "the demo writes the report and says where"
# Its clients' buffers are the fake libcuda's device memory: the ipc refit arrives, no hop staged.
like "$(cat "$TMP/demo.out")" "3 of 3 buffers arrived whole at the inference process$" "the CPU demo's ipc refit arrives whole"
like "$(cat "$TMP/demo.out")" "hops: [0-9]+ pushed, [0-9]+ pulled, 0 staged" "the CPU demo's hops are pushed or pulled, none staged"
cmp -s "$TMP/demo/report.html" <("$INSPECT" --html - "$TMP"/demo/*/records 2> /dev/null)
ok $? "the demo's report is the one --html writes of its records"
recs=("$TMP"/demo/*/records)
tap_run 60 "$INSPECT" --html "$TMP/demo.html" "${recs[@]}" > "$TMP/table.out" 2> "$TMP/err"
is "$?" 0 "--html FILE: exit 0"
like "$(head -1 "$TMP/table.out")" "^[0-9]+ process" "the table still goes to stdout"
is "$(grep -Eci '(src|href) *=|https?://|@import|url\(' "$TMP/demo.html")" 0 \
    "self-contained: no src/href, no URL, no import"
jdoc() { python3 - "$1" <<'PY'
import json, re, sys
page = open(sys.argv[1], encoding="utf-8", errors="replace").read()
m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
d = json.loads(m.group(1))
print(len(d["procs"]), len(d["comms"]), len(d["ranks"]), len(d["decisions"]))
PY
}
want=$("$INSPECT" --json "${recs[@]}" | jq -r '[(.processes|length), (.communicators|length),
       ([.communicators[].ranks[]]|length)] | join(" ")')
got=$(jdoc "$TMP/demo.html")
is "${got% *}" "$want" "the page's data holds every process, communicator and rank of --json"
like "$got" " [1-9][0-9]*$" "and the roots' decisions"

# Hostile strings in a record stay data: no raw "</script>" or "<" from them.
mkdir -p "$TMP/hostile"
f=$(ls "${recs[0]}"/*.jsonl | head -1)
jq -c 'if .type=="load" then .title="</script><img src=x onerror=alert(1)><!--" else . end' "$f" \
    > "$TMP/hostile/${f##*/}"
"$INSPECT" --html "$TMP/hostile.html" "$TMP/hostile" > /dev/null 2>&1
is "$?" 0 "a title with markup in it: exit 0"
is "$(grep -c '</script><img\|<img src\|<!--"' "$TMP/hostile.html")" 0 "the markup is not in the page raw"
is "$(python3 -c '
import json,re,sys
d=json.loads(re.search(r"id=\"data\">(.*?)</script>",open(sys.argv[1]).read(),re.S).group(1))
print([p[2] for p in d["procs"]][0])' "$TMP/hostile.html")" "</script><img src=x onerror=alert(1)><!--" \
    "and it reads back intact"
# Malformed record files: reported in the page as the table reports them, the rest kept.
"$INSPECT" --html "$TMP/bad.html" "$FIX/bad" > /dev/null 2> "$TMP/bad.err"
is "$(python3 -c '
import json,re,sys
d=json.loads(re.search(r"id=\"data\">(.*?)</script>",open(sys.argv[1]).read(),re.S).group(1))
print(len(d["errors"]))' "$TMP/bad.html")" "$(grep -c . "$TMP/bad.err")" "the bad fixture: each input error the table gives is in the page"
out=$("$INSPECT" --html - "${recs[@]}" 2> /dev/null)
like "$(printf '%s' "$out" | head -1)" '^<!DOCTYPE html>' "--html -: the page on stdout, instead of the table"
"$INSPECT" --html > /dev/null 2> "$TMP/err"
is "$?:$(head -1 "$TMP/err")" "2:ncclshim-inspect: --html needs a FILE ('-' for stdout)" "--html without FILE: usage error"
"$INSPECT" --html "$TMP/no/such/dir/r.html" "${recs[@]}" > /dev/null 2> "$TMP/err"
st=$?
is "$st" 2 "an unwritable report path: exit 2"
like "$(cat "$TMP/err")" "cannot write $TMP/no/such/dir/r.html" "and says which path"

# 2. In the browser.
CHROME=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$CHROME" ]; then
    echo "ok $((_tap_n + 1)) # SKIP no chromium (apt-get install chromium; .ci/run installs it)"
    _tap_n=$((_tap_n + 1))
    done_testing
    exit $?
fi
browse() { # browse FILE ARGS...: one headless chromium run, bounded, its own profile
    local page=$1
    shift
    tap_run 90 "$CHROME" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
        --user-data-dir="$TMP/chrome" --window-size=1400,900 "$@" "file://$page" 2> "$TMP/chrome.err"
}
dom=$(browse "$TMP/demo.html" --dump-dom)
like "$dom" "<title>ncclshim report: ok</title>" "chromium: the demo's report passed its own checks"
like "$dom" "class=\"ok\">ok: ${want%% *} processes, $(echo "$want" | cut -d' ' -f2) communicators" \
    "its status counts what the data holds"
browse "$TMP/demo.html" --screenshot="$TMP/demo.png" > /dev/null
read -r w h ink colours < <(python3 "$ROOT/tests/inspect/png_ink.py" "$TMP/demo.png" 2>&1)
is "$w x $h" "1400 x 900" "a screenshot of the window"
ok $(( ${ink:-0} > 2000 && ${colours:-0} > 20 ? 0 : 1 )) "the screenshot is not blank ($ink inked samples, $colours colours)"

# Problems marked where they happened: a Socket fallback seen in NCCL's log, a dropped
# communicator that carried data, an ipc peer lost.
"$INSPECT" --html "$TMP/problems.html" "$FIX/efasim_passthrough" "$FIX/rv_drop" "$FIX/rv_ipc_dead_peer" > /dev/null 2>&1
dom=$(browse "$TMP/problems.html" --dump-dom)
like "$dom" "<title>ncclshim report: ok</title>" "the problems' report passed its checks"
like "$dom" 'data-marks="socket:[1-9][0-9]* drop:[1-9][0-9]* peer:[1-9][0-9]* ' \
    "a marker for each: Socket fallback, dropped with data, peer lost"
like "$dom" "ok: 7 processes, 4 communicators, 9 ranks, 2 decisions, 5 problems" "every problem counted"

# The page's checks can fail: a report whose data is cut off says so in its title.
python3 -c 'import sys; p = open(sys.argv[1]).read(); a = p.index("id=\"data\">") + 20; b = p.index("</script>", a)
open(sys.argv[2], "w").write(p[:(a + b) // 2] + p[b:])' "$TMP/problems.html" "$TMP/broken.html"
dom=$(browse "$TMP/broken.html" --dump-dom)
like "$dom" "<title>ncclshim report: FAILED: data unreadable" "a page with broken data reports FAILED"
done_testing
