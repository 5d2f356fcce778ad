#!/bin/bash
# Fuzz of the record directory's states (issue 17): random combinations of what
# stands at /tmp/ncclshim-<uid> (nothing, a directory of any owner and mode, a
# symlink, a file, a FIFO) and at the record file's names in it (nothing, a
# symlink to the user's own file, a dangling one, a FIFO, a directory, another
# user's file, a hard link).  Each run, as a second unprivileged user: the
# application is never harmed nor hung, nothing is written outside a directory
# private to the user, and stderr has at most one line about it, which says
# where records went or that they are off.  RECDIR_FUZZ_N runs (default 60),
# seed RECDIR_FUZZ_SEED (printed).
. "$(dirname "$0")/../tap.sh"
[ "$(id -u)" = 0 ] || skip_all "needs root, to create a second user and plant other users' files"
U=ncclshim-fz-$$
second_user "$U" || skip_all "no unprivileged user $U (useradd failed)"
D=/tmp/ncclshim-$VU
H=fz
B8=$(head -c 8 /proc/sys/kernel/random/boot_id)
N=${RECDIR_FUZZ_N:-60}
SEED=${RECDIR_FUZZ_SEED:-$$}
RANDOM=$SEED
echo "# seed $SEED, $N runs"
clean() { rm -rf "$D" "$D".??????; }
trap 'clean; rm -rf "$TMP"; userdel "$U" > /dev/null 2>&1' EXIT
chmod 0755 "$TMP"
T=$TMP/victim-rc
mkdir -m 0777 "$TMP/attacker"
# A directory (not a symlink) of the user that nobody else can write.
private_dir() {
    [ -d "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %u "$1")" = "$VU" ] && [ $((0$(stat -c %a "$1") & 022)) = 0 ]
}
pick() { local a=("$@"); echo "${a[RANDOM % ${#a[@]}]}"; }

fail=0
for i in $(seq 1 "$N"); do
    clean
    rm -rf "$TMP/attacker"/* "$TMP/nowhere" "$TMP/run"; mkdir -p "$TMP/run"
    echo precious > "$T"; chown "$VU" "$T"; chmod 0600 "$T"
    dstate=$(pick absent dir dir dir dir link-attacker link-nowhere link-own file fifo)
    owner=$(pick "$VU" "$VU" 0 65534)
    mode=$(pick 700 700 750 755 770 777 1777 500 300)
    desc="dir=$dstate"
    case $dstate in
    dir) mkdir "$D"; chown "$owner" "$D"; chmod "$mode" "$D"; desc="$desc owner=$owner mode=$mode" ;;
    link-attacker) ln -s "$TMP/attacker" "$D" ;;
    link-nowhere) ln -s "$TMP/nowhere" "$D" ;;
    link-own) mkdir -m 0700 "$TMP/own$i"; chown "$VU" "$TMP/own$i"; ln -s "$TMP/own$i" "$D" ;;
    file) echo x > "$D" ;;
    fifo) mkfifo "$D" ;;
    esac
    # What to plant at the record names (base name, then .1, .2): chosen now, planted once the pid is known.
    plant=""
    if [ "$dstate" = dir ]; then
        for k in "" .1 .2; do
            f=$(pick none none symlink dangling fifo dir rootfile ownfile hardlink)
            desc="$desc name$k=$f"
            n="$D/\$N$k.jsonl"
            case $f in
            symlink) plant="$plant ln -s '$T' $n;" ;;
            dangling) plant="$plant ln -s '$TMP/nowhere' $n;" ;;
            fifo) plant="$plant mkfifo $n;" ;;
            dir) plant="$plant mkdir $n;" ;;
            rootfile) plant="$plant : > $n; chmod 0666 $n;" ;;
            ownfile) plant="$plant : > $n; chown $VU $n; chmod 0600 $n;" ;;
            hardlink) plant="$plant ln '$T' $n;" ;;
            esac
        done
    fi
    timeout -k 2 "$(tap_scale 20)" env -u NCCLSHIM_LOG_DIR sh -c "echo \$\$ > '$TMP/run/pid'; N=ncclshim.$H.\$\$.$B8.\$(sed 's/.*) //' /proc/\$\$/stat | cut -d' ' -f20); $plant
        exec setpriv --reuid=$VU --regid=$VG --clear-groups env NCCLSHIM_HOSTNAME=$H LD_PRELOAD='$SHIM' '$BIN/client_linked' linked basic" \
        > "$TMP/run/out" 2> "$TMP/run/err"
    rc=$?
    P=$(cat "$TMP/run/pid")
    lines=$(grep -c '^ncclshim: ' "$TMP/run/err")
    line=$(grep '^ncclshim: ' "$TMP/run/err")
    rec=$(ls "$D"*/ncclshim.$H.$P*.jsonl 2>/dev/null | while read -r f; do
        # (plain files only: the test must not hang on the FIFOs it planted)
        [ -f "$f" ] && [ ! -L "$f" ] && [ "$(jq -r 'select(.type=="load") | .pid' "$f" 2>/dev/null)" = "$P" ] && echo "$f"; done)
    why=""
    [ "$rc" = 0 ] || why="$why rc=$rc"
    [ "$(cat "$T")" = precious ] || why="$why the-user's-file-was-written"
    [ -z "$(ls -A "$TMP/attacker")" ] || why="$why wrote-into-the-attacker's-directory"
    [ ! -e "$TMP/nowhere" ] || why="$why followed-a-dangling-symlink"
    [ "$lines" -le 1 ] || why="$why $lines-lines"
    # Every record file of this run (a load record of pid P) is in a directory private to the user
    # (the shim could only have reached the default directory, its siblings, or what $TMP holds).
    for f in $(find "$D"* "$TMP" -xdev -maxdepth 3 -user "$VU" -type f -name "ncclshim.$H.$P*.jsonl" 2>/dev/null | sort -u); do
        grep -q '"type":"load"' "$f" || continue
        private_dir "$(dirname "$f")" || why="$why wrote-$f-outside-a-private-directory"
    done
    if [ -n "$rec" ]; then
        rd=$(dirname "$(echo "$rec" | head -1)")
        private_dir "$rd" || why="$why records-in-a-non-private-directory($(stat -c '%u %a %F' "$rd"))"
        [ "$(stat -c '%u %h %F' "$(echo "$rec" | head -1)")" = "$VU 1 regular file" ] || why="$why record-file-not-plain"
        [ "$lines" = 0 ] || echo "$line" | grep -Eq 'records go to .* instead$' || why="$why unclear-line"
    else
        echo "$line" | grep -q 'records are off' || why="$why no-records-and-no-line-saying-so"
    fi
    if [ -n "$why" ]; then
        fail=$((fail + 1))
        echo "# run $i ($desc):$why"
        echo "#   stderr: $line"
    fi
done
clean
is "$fail" 0 "$N random record-directory states: never hung or harmed, never wrote outside a private directory, at most one clear line"
done_testing
