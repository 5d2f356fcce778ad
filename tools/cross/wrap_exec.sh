#!/bin/bash
# usage: tools/cross/wrap_exec.sh FILE...
# Each FILE that is a program of another architecture (an ELF executable with a program
# interpreter) moves to FILE.<arch>, and FILE becomes a script that runs it under qemu-user.
# Explicitly, not through binfmt_misc, which needs a privileged mount that a container may
# not have.  So the tests run a program by its usual path, it sees that path as its argv[0]
# (-0), and its system() or popen() of another wrapped program goes through the host's
# /bin/sh and this script again.  A FILE of the host, or already a script, stays as it is.
set -eu
for f in "$@"; do
    case $f in *.aarch64) continue ;; esac # a program already moved aside by an earlier run
    hdr=$(readelf -h -l "$f" 2> /dev/null) || continue
    case $hdr in *"program interpreter"*) ;; *) continue ;; esac
    case $hdr in
    *"Machine:"*AArch64*) arch=aarch64 ;;
    *) continue ;; # the host's own
    esac
    mv -f "$f" "$f.$arch"
    # shellcheck disable=SC2016 # $0 and $@ are the script's, expanded when it runs
    printf '#!/bin/sh\n# %s, an %s program run by qemu-user (tools/cross/wrap_exec.sh)\nexec qemu-%s-static -0 "$0" "$0.%s" "$@"\n' \
        "$(basename "$f.$arch")" "$arch" "$arch" "$arch" > "$f"
    chmod 755 "$f"
done
