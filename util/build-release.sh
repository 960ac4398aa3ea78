#!/bin/bash
# Builds the module of an earlier release from this repository's history,
# for the tests that run two versions on one Redis (t/200): the tree of
# COMMIT (git archive), configured and built against Debian's nginx as
# the Makefile builds this one, into build/release-NAME/.  Built once:
# later runs only print the path.  Prints the .so's path.
#
#   util/build-release.sh 1db18b0 0.6.0
#
# Exits 2, saying why, where there is no history to build it from (not a
# git checkout, or a shallow clone without that commit): a skip, not a
# failure.
set -e
cd "$(dirname "$0")/.."
root=$PWD

commit=${1:?usage: util/build-release.sh COMMIT NAME}
name=${2:?usage: util/build-release.sh COMMIT NAME}
nginx_src=${NGINX_SRC:-/usr/share/nginx/src}
dir=$root/build/release-$name
so=$dir/objs/ngx_http_idem_module.so

if [ -f "$so" ]; then
    echo "$so"
    exit 0
fi

if ! git -C "$root" rev-parse --verify -q "$commit^{commit}" >/dev/null 2>&1
then
    echo "no git history with $commit (release $name) to build it from" >&2
    exit 2
fi

if [ ! -d "$nginx_src" ]; then
    echo "no $nginx_src: run 'make deps'" >&2
    exit 1
fi

mkdir -p "$root/build"

# one build at a time (two test runs may start together); the loser of
# the race finds the .so made by the winner
exec 9>"$root/build/release-$name.lock"
flock 9

if [ -f "$so" ]; then
    echo "$so"
    exit 0
fi

# built aside, then moved in place: an interrupted build leaves no .so
tmp=$dir.tmp
rm -rf "$tmp" "$dir"
mkdir -p "$tmp/src" "$tmp/objs"
git -C "$root" archive "$commit" | tar -x -C "$tmp/src"

# Debian's own flags for nginx, as the Makefile's
cflags="-g -O2 -fstack-protector-strong -Wformat -Werror=format-security"
cflags="$cflags -fPIC -Wdate-time -D_FORTIFY_SOURCE=2"

echo "building release $name ($commit) into $dir" >&2
(
    cd "$nginx_src" && . ./conf_flags &&
    ./configure "${NGX_CONF_FLAGS[@]}" --with-cc-opt="$cflags" \
        --add-dynamic-module="$tmp/src" --builddir="$tmp/objs" \
        > "$tmp/configure.log" 2>&1
) || { tail -20 "$tmp/configure.log" >&2; exit 1; }

make -f "$tmp/objs/Makefile" -C "$nginx_src" modules \
    > "$tmp/make.log" 2>&1 || { tail -20 "$tmp/make.log" >&2; exit 1; }

# the paths inside objs/ name the folder it was built in: kept as it is
mv "$tmp" "$dir"
echo "$so"
