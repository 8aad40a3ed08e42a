#!/bin/sh
# shellgate's sudo (generated; bound read-only over /usr/local/bin/sudo in
# every container). The sandbox user has no privileges to raise: commands
# run as uid 1000 with no capabilities, under no_new_privs, on nosuid mounts.
# A command asked to run as that user itself (`sudo -u user -- CMD`, the
# prefix agent frameworks add) simply runs; anything else is refused, saying
# why, with exit status 1.

refuse() {
    cat >&2 <<'MESSAGE'
shellgate: the sandbox user has no privileges; sudo is not available.
Commands here run as the unprivileged user `user` (uid 1000, home /home/user)
with no capabilities, by design: there is no root to become. Install without
root instead (`pip install --user`, `npm install -g` and `pip install` land in
~/.local, first on PATH), write under /home/user, /mnt/data or /tmp, or use an
image that already has what you need.
MESSAGE
    exit 1
}

target=root
while [ "$#" -gt 0 ]; do
    case $1 in
        --) shift; break ;;
        -u|--user)
            [ "$#" -ge 2 ] || refuse
            target=$2
            shift 2 ;;
        --user=*) target=${1#--user=}; shift ;;
        -u*) target=${1#-u}; shift ;;
        -E|-H|-n|--preserve-env|--preserve-env=*|--set-home|--non-interactive) shift ;;
        -*)
            # A cluster of the harmless flags (`-nE`); anything else asks
            # for what there is not (a shell as root, a listing, a group).
            case ${1#-} in
                *[!EHn]*) refuse ;;
            esac
            shift ;;
        *) break ;;
    esac
done

case $target in
    user|'#1000') ;;
    *) refuse ;;
esac
[ "$#" -gt 0 ] || refuse
exec "$@"
