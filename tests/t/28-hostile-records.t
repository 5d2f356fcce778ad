#!/bin/bash
# Record files on a machine shared with other users (issue 17): nothing another
# user or a stale file puts at the record paths can redirect the records,
# hang the process, or take its records away without one clear line.
# The default directory cases need a second, unprivileged user (created as root,
# as CI runs; without root they are skipped), this test's own, so that the fuzz
# test running at the same time (another user) never shares its directory.
. "$(dirname "$0")/../tap.sh"
# A file is planted at the record file's name before the shim starts; the name carries the
# process's start time, which qemu-user makes up (a few ticks after the kernel's), so the
# name cannot be known ahead under it.  The code is the same on every architecture.
skip_emulated "qemu-user makes up /proc/self/stat's start time, so the record file's name cannot be planted ahead"

CLIENT=("$BIN/client_linked" linked basic)
H=hostile
# run <name> <dir or ""> <plant script or ""> [setpriv args...]: runs the client with
# the shim as pid P, after `plant P` ran as root with N the stem of this process's own
# record file name (ncclshim.<host>.<pid>.<boot8>.<start>).  stdout/err/rc/pid/stem under $TMP/<name>.
run() {
    local name=$1 dir=$2 plant=$3; shift 3
    local o=$TMP/$name
    mkdir -p "$o"
    printf '%s\n' "${plant:-:}" > "$o/plant.sh"
    timeout -k 5 "$(tap_scale 30)" env -u NCCLSHIM_LOG_DIR sh -c '
        o=$1; dir=$2; hp=$3; shift 3
        N="ncclshim.$hp.$$.$(head -c 8 /proc/sys/kernel/random/boot_id).$(sed "s/.*) //" /proc/$$/stat | cut -d" " -f20)"
        echo $$ > "$o/pid"; echo "$N" > "$o/stem"; P=$$ N=$N . "$o/plant.sh" || exit 99
        exec "$@"' sh "$o" "$dir" "$H" "$@" \
        env ${dir:+NCCLSHIM_LOG_DIR=$dir} NCCLSHIM_HOSTNAME=$H LD_PRELOAD="$SHIM" "${CLIENT[@]}" \
        > "$o/out" 2> "$o/err"
    echo $? > "$o/rc"
}
nlines() { grep -c '^ncclshim: ' "$1" || true; }

# --- the explicit NCCLSHIM_LOG_DIR (any user's, any mode: a shared directory) -------------
S=$TMP/shared; mkdir -p "$S"; chmod 1777 "$S"
B8=$(head -c 8 /proc/sys/kernel/random/boot_id)
echo 'precious' > "$TMP/bashrc"

# A symlink planted at the record file's name.
run symlink "$S" 'ln -s "'"$TMP"'/bashrc" "$dir/$N.jsonl"'
P=$(cat "$TMP/symlink/pid"); N=$(cat "$TMP/symlink/stem")
is "$(cat "$TMP/symlink/rc")" 0 "a symlink at the record path does not harm the application"
is "$(cat "$TMP/bashrc")" precious "the file it points to is untouched"
is "$(jq -r 'select(.type=="load") | .pid' "$S/$N.1.jsonl")" "$P" "records go to a new name beside it"
like "$(cat "$TMP/symlink/err")" "^ncclshim: warning: record file $S/$N.jsonl is taken \(a symbolic link\); records go to $S/$N.1.jsonl instead$" "one line says why and where"
is "$(nlines "$TMP/symlink/err")" 1 "and only one"
is "$(jq -r 'select(.type=="warning" and .what=="record-file") | .message' "$S/$N.1.jsonl" | grep -c 'symbolic link')" 1 "the records keep that warning too"

# A FIFO at the record file's name: no reader, and the process must not wait for one.
run fifo "$S" 'mkfifo "$dir/$N.jsonl"'
P=$(cat "$TMP/fifo/pid"); N=$(cat "$TMP/fifo/stem")
is "$(cat "$TMP/fifo/rc")" 0 "a FIFO at the record path does not hang the application (bounded: 30 s)"
ok $([ -s "$S/$N.1.jsonl" ] && echo 0 || echo 1) "records go to a new name"
like "$(cat "$TMP/fifo/err")" "record file .*$N.jsonl is taken \(a FIFO or socket\)" "one line says it was a FIFO"
is "$(nlines "$TMP/fifo/err")" 1 "and only one"

# A file of another user at the name (e.g. left by a process of the same pid).
run other "$S" ': > "$dir/$N.jsonl"; chown 65534 "$dir/$N.jsonl"'
P=$(cat "$TMP/other/pid"); N=$(cat "$TMP/other/stem")
is "$(stat -c %s "$S/$N.jsonl")" 0 "another user's file at the record path is not written"
like "$(cat "$TMP/other/err")" "is taken \(owned by uid 65534\); records go to .*$N.1.jsonl" "one line says whose it is and where records went"

# A directory, a dangling symlink: the same.
run dirname "$S" 'mkdir "$dir/$N.jsonl"'
P=$(cat "$TMP/dirname/pid"); N=$(cat "$TMP/dirname/stem")
ok $([ -s "$S/$N.1.jsonl" ] && echo 0 || echo 1) "a directory at the record path: records go to a new name"
run dangling "$S" 'ln -s "'"$TMP"'/nowhere" "$dir/$N.jsonl"'
P=$(cat "$TMP/dangling/pid"); N=$(cat "$TMP/dangling/stem")
ok $([ ! -e "$TMP/nowhere" ] && [ -s "$S/$N.1.jsonl" ] && echo 0 || echo 1) "a dangling symlink is not followed to create its target"

# This user's own file of that name (another process of this pid, host, boot and start in
# another PID namespace, or an earlier image of this one before exec): never shared.
run own "$S" 'echo "{\"type\":\"before-exec\"}" > "$dir/$N.jsonl"'
P=$(cat "$TMP/own/pid"); N=$(cat "$TMP/own/stem")
is "$(jq -r .type "$S/$N.jsonl" | tr '\n' ' ')" "before-exec " "this user's own plain file of that name is not written to"
is "$(jq -r 'select(.type=="load") | .pid' "$S/$N.1.jsonl")" "$P" "the records go to the next name, whole"
like "$(cat "$TMP/own/err")" "^ncclshim: warning: record file $S/$N.jsonl is taken \(a file already\); records go to $S/$N.1.jsonl instead$" "one line says so"

# NCCLSHIM_HOSTNAME is free text: the file name's host part cannot leave the directory.
mkdir -p "$TMP/esc/a/b"
H='x/../../esc' run escape "$TMP/esc/a/b" ''
P=$(cat "$TMP/escape/pid")
is "$(cd "$TMP/esc" && find . -type f | sort | tr '\n' ' ')" "./a/b/ncclshim.x_.._.._esc.$P.$B8.$(sed "s/.*\.//" "$TMP/escape/stem").jsonl " "NCCLSHIM_HOSTNAME=x/../../esc writes inside the directory, its separators replaced"
is "$(jq -r 'select(.type=="load") | .host' "$TMP/esc/a/b"/*.jsonl)" 'x/../../esc' "the records still carry the host as given"
H='..' run dots "$TMP/esc/a/b" ''
P=$(cat "$TMP/dots/pid")
ok $([ -f "$TMP/esc/a/b/ncclshim._..$P.$B8.$(sed "s/.*\.//" "$TMP/dots/stem").jsonl" ] && echo 0 || echo 1) "a host named '..' becomes '_.'"

# --- the default directory, /tmp/ncclshim-<uid>, as a second user ----------------------------
if [ "$(id -u)" != 0 ]; then
    echo "# SKIP default-directory cases: they need root to create a second user and plant its files"
    done_testing; exit
fi
U=ncclshim-rec-$$
second_user "$U" || { echo "# SKIP default-directory cases: no unprivileged user $U (useradd failed)"; done_testing; exit; }
D=/tmp/ncclshim-$VU
AS=(setpriv --reuid="$VU" --regid="$VG" --clear-groups)
clean() { rm -rf "$D" "$D".??????; }
trap 'clean; rm -rf "$TMP"; userdel "$U" > /dev/null 2>&1' EXIT
# The victim's own file another user wants written: writable by the victim.
T=$TMP/victim-rc; echo precious > "$T"; chown "$VU" "$T"; chmod 0600 "$T"; chmod 0755 "$TMP"
# private <name>: records of that run went to a directory private to the victim.
private() {
    local P; P=$(cat "$TMP/$1/pid")
    local f; f=$(ls "$D"*/ncclshim.$H.$P*.jsonl 2>/dev/null | head -1)
    [ -n "$f" ] && [ "$(stat -c '%U %a %F' "$(dirname "$f")")" = "$U 700 directory" ] &&
        [ "$(stat -c '%U %h %F' "$f")" = "$U 1 regular file" ] && [ "$(jq -r 'select(.type=="load") | .pid' "$f")" = "$P" ]
}

clean
run dflt "" '' "${AS[@]}"
is "$(cat "$TMP/dflt/rc")" 0 "the default directory is created"
is "$(stat -c '%U %a' "$D")" "$U 700" "owned by the user, mode 0700"
ok $(private dflt && echo 0 || echo 1) "and records go there"
is "$(nlines "$TMP/dflt/err")" 0 "quietly"

# Another user made the directory first and planted symlinks named like the victim's files.
clean; mkdir -m 1777 "$D"
run planted "" 'ln -s "'"$T"'" "'"$D"'/$N.jsonl"' "${AS[@]}"
is "$(cat "$T")" precious "a directory made by another user with a symlink in it: the victim's file is untouched"
ok $(private planted && echo 0 || echo 1) "records go to a fresh private directory"
like "$(cat "$TMP/planted/err")" "^ncclshim: warning: record directory $D is owned by uid 0, not this user \($VU\) \(another user could read or redirect the records\); records go to $D\.[A-Za-z0-9]{6} instead$" "one line says why and where"
is "$(nlines "$TMP/planted/err")" 1 "and only one"

# The directory is a symlink (to a directory of the attacker's).
clean; mkdir -m 0777 "$TMP/attacker"; ln -s "$TMP/attacker" "$D"
run dirlink "" '' "${AS[@]}"
is "$(ls "$TMP/attacker" | wc -l)" 0 "a symlink at the default directory is not followed"
ok $(private dirlink && echo 0 || echo 1) "records go to a fresh private directory"
like "$(cat "$TMP/dirlink/err")" "record directory $D is a symbolic link" "one line says so"
rm -f "$D"

# The victim's own directory, but writable by its group.
clean; mkdir -m 0770 "$D"; chown "$VU" "$D"; chmod 0770 "$D"
run grpw "" '' "${AS[@]}"
ok $(private grpw && echo 0 || echo 1) "a group-writable default directory is not used: records go to a private one"
like "$(cat "$TMP/grpw/err")" "record directory $D is writable by its group \(mode 0770\)" "one line says so"
is "$(ls "$D" | wc -l)" 0 "nothing written in the group-writable one"

# A FIFO where the directory should be.
clean; mkfifo "$D"
run dirfifo "" '' "${AS[@]}"
is "$(cat "$TMP/dirfifo/rc")" 0 "a FIFO at the default directory does not hang the application"
ok $(private dirfifo && echo 0 || echo 1) "records go to a private directory"
clean
done_testing
