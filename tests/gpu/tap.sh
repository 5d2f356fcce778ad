# The GPU tests' TAP helpers (sourced by tests/gpu/run.sh and tests/gpu/lost.sh).
# shellcheck shell=bash
n=0
nfail=0
ok() { # ok <status> <description>
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; nfail=$((nfail + 1)); fi
}
skip() { # skip <description>: counted, never a failure
    n=$((n + 1))
    echo "ok $n # SKIP $1"
}
diag() { sed 's/^/# /'; }
import_checks() { # CHECK lines of check.py -> TAP; the rest (diagnostics) as is
    local line
    while IFS= read -r line; do
        case $line in
            "CHECK ok "*) ok 0 "${line#CHECK ok }" ;;
            "CHECK fail "*) ok 1 "${line#CHECK fail }" ;;
            "#"*) echo "$line" ;;
            *) echo "# $line" ;;
        esac
    done
}

