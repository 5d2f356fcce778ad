# Sourced first by every bash test (tests/tap.sh sources it for the tests that use that): a test
# run before `make` says so in one TAP line, instead of exiting 127 and leaving prove to say
# "No plan found".  need_built FILE...: stop there unless each file exists.
need_built() {
    local f
    for f in "$@"; do
        [ -e "$f" ] && continue
        echo "Bail out! run make first: $f is missing (make builds what the tests run)"
        exit 255
    done
}
