#!/bin/bash
# The HTML report at scale: bench/html_scale.py writes a job of PROCS processes (about 51
# records each), then this measures `ncclshim-inspect --html` (time, peak memory, file
# size) and headless chromium loading the page (the page's own render time, from its
# script's start to the table and timeline drawn, and the browser's wall time for
# --dump-dom, start-up included).  Numbers go to docs/inspect.md.
# usage: bench/html_report.sh [PROCS] [RUNS]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROCS=${1:-2000}
RUNS=${2:-3}
CHROME=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)} ||
    { echo "html_report.sh: no chromium (apt-get install chromium)" >&2; exit 1; }
D=$(mktemp -d "${TMPDIR:-/tmp}/ncclshim-htmlbench.XXXXXX")
trap 'rm -rf "$D"' EXIT
python3 "$ROOT/bench/html_scale.py" "$D" --procs "$PROCS" || exit 1
echo "records: $(du -sh "$D/records" | cut -f1) in $(find "$D/records" -name "*.jsonl" | wc -l) files"
for _ in $(seq "$RUNS"); do
    /usr/bin/time -f "inspect --html: %e s, peak RSS %M KiB" "$ROOT/tools/ncclshim-inspect" --html "$D/r.html" \
        "$D/records" > /dev/null 2> "$D/time" || { cat "$D/time"; exit 1; }
    tail -1 "$D/time"
done
echo "page: $(stat -c %s "$D/r.html") bytes"
for _ in $(seq "$RUNS"); do
    s=$(date +%s.%N)
    dom=$(timeout -k 5 300 "$CHROME" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
        --user-data-dir="$D/chrome" --window-size=1400,900 --dump-dom "file://$D/r.html" 2> /dev/null)
    e=$(date +%s.%N)
    printf 'chromium: %s; page render %s ms; wall %.2f s\n' "$(printf '%s' "$dom" | grep -o '<title>[^<]*' | cut -c8-)" \
        "$(printf '%s' "$dom" | grep -o 'data-render-ms="[0-9]*"' | grep -o '[0-9]*')" "$(awk -v a="$s" -v b="$e" 'BEGIN { print b - a }')"
done
