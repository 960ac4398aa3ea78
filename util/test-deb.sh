#!/bin/bash
# make test-deb: the Debian package on this machine's nginx, from build to
# purge.
#
#   make deb; lintian (no error, no warning); make install lays out the
#   package's files; autopkgtest with the null virt server: it installs
#   the package with apt-get and runs debian/tests (a call served and
#   recorded through Debian's nginx, on 127.0.0.1:6090 and 6091); then,
#   on the package autopkgtest left installed: dpkg -i again (the
#   modules-enabled link stays, or stays deleted), dpkg -r, dpkg --purge,
#   and no file of the package is left.
#
# The system nginx service is never started, reloaded or stopped (only
# "nginx -t" reads /etc/nginx). The package is purged on any exit.
set -e
cd "$(dirname "$0")/.."
root=$PWD

if [ "$(id -u)" != 0 ]; then
    exec sudo -E "$0" "$@"
fi

start=$(date +%s)
pkg=libnginx-mod-http-idem
link=/etc/nginx/modules-enabled/50-mod-http-idem.conf
avail=/usr/share/nginx/modules-available/mod-http-idem.conf
nginx=/usr/sbin/nginx

tests=0
ok() {
    tests=$((tests + 1))
    echo "ok $tests - $*"
}

fail() {
    tests=$((tests + 1))
    echo "not ok $tests - $*"
    exit 1
}

# check DESCRIPTION COMMAND...: the command's success is the test's
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

installed() {
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'
}

known() {
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
        | grep -qv 'not-installed'
}

# dpkg ARGS: dpkg, waiting while another apt-get or dpkg holds its lock
dpkg_wait() {
    local _ out
    for _ in $(seq 150); do
        if out=$(dpkg "$@" 2>&1); then
            echo "$out"
            return 0
        fi
        case $out in
        *lock*) sleep 2 ;;
        *) echo "$out"; return 1 ;;
        esac
    done
    echo "$out"
    return 1
}

# refuse before building: this test installs and purges the package
if known; then
    echo "$pkg is on this machine already; \"make test-deb\" installs"
    echo "and purges it: remove it first (dpkg --purge $pkg)"
    exit 1
fi

tmp=$(mktemp -d /tmp/idem-test-deb.XXXXXX)
ours=

cleanup() {
    if [ -n "$ours" ] && known; then
        echo "# purging $pkg"
        dpkg_wait --purge "$pkg" >/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# ----------------------------------------------------------------- build

util/deb.sh
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
arch=$(dpkg --print-architecture)
out=$root/build/deb
deb=$out/${pkg}_${version}_$arch.deb
changes=$out/${pkg}_${version}_$arch.changes
check "make deb built ${deb#"$root"/}" test -f "$deb"

# lintian: any error or warning fails the test, the rest is listed
lintian --fail-on error,warning --display-info "$changes" \
    > "$tmp/lintian.txt" 2>&1 || lintian_status=$?
grep -v 'running with root privileges' "$tmp/lintian.txt" | sed 's/^/# /'
tags="$(grep -c '^E:' "$tmp/lintian.txt" || true) errors"
tags="$tags, $(grep -c '^W:' "$tmp/lintian.txt" || true) warnings"
tags="$tags, $(grep -c '^I:' "$tmp/lintian.txt" || true) infos"
check "lintian: no errors, no warnings ($tags)" \
    test "${lintian_status:-0}" = 0

# make install says it lays out the package's files: the same paths (the
# package adds its copyright and changelog, and gzips the larger docs),
# the same mod-http-idem.conf. It installs the module the package build
# left in obj-<triplet>/ (BUILD=), so nothing is built again.
src=$out/$pkg-$version
obj=$(find "$src" -maxdepth 1 -name 'obj-*' -type d | head -1)
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' \
    | sed 's/\.gz$//' | grep -vE '/(copyright|changelog)$' | sort \
    > "$tmp/deb.files"
make -s -C "$src" install BUILD="$obj" DESTDIR="$tmp/destdir" \
    IDEM_ENABLE=no > /dev/null
(cd "$tmp/destdir" && find . ! -type d | sed 's/^\.//' | sort) \
    > "$tmp/install.files"
n=$(wc -l < "$tmp/deb.files")
check "make install and the package: the same $n files" \
    diff -u "$tmp/deb.files" "$tmp/install.files"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ".$avail" > "$tmp/deb-mod.conf"
check "make install and the package: the same mod-http-idem.conf" \
    cmp -s "$tmp/deb-mod.conf" "$tmp/destdir$avail"

# ---------------------------------------------------------- autopkgtest

# debian/tests from the tree the package was built from; the null virt
# server is this machine, and leaves the package installed
sys_ok=
$nginx -t -q 2>/dev/null && sys_ok=yes
ours=yes
autopkgtest --output-dir "$out/autopkgtest" \
    ${TEST_DEB_PORT:+--env=TEST_DEB_PORT=$TEST_DEB_PORT} \
    "$deb" "$src/" \
    -- null > "$out/autopkgtest.log" 2>&1 || autopkgtest_status=$?
sed -n '/^ok \|^not ok \|^# \|^1\.\./p' \
    "$out/autopkgtest/serve-call-stdout" 2>/dev/null | sed 's/^/    /'
sed 's/^/# /' "$out/autopkgtest/summary" 2>/dev/null || true
# 0: every test passed (2 would be a test skipped: not a pass here)
check "autopkgtest: debian/tests pass (build/deb/autopkgtest.log)" \
    test "${autopkgtest_status:-0}" = 0
check "autopkgtest left $pkg installed" installed

# ------------------------------------------------------------ upgrade

# the postinst makes the link on a first install only: an upgrade (here a
# reinstall, the same path) keeps it, and keeps it away when the admin
# deleted it
dpkg_wait -i "$deb" > /dev/null
check "dpkg -i again: the link stays" \
    test "$(readlink "$link")" = "$avail"
rm "$link"
dpkg_wait -i "$deb" > /dev/null
check "dpkg -i again: a link the admin deleted stays deleted" \
    test ! -e "$link" -a ! -L "$link"
ln -s "$avail" "$link"

# ------------------------------------------------------ remove, purge

dpkg-query -L "$pkg" > "$tmp/pkg.paths"
dpkg_wait -r "$pkg" | sed 's/^/# /'
check "dpkg -r: the link is set aside as $link.removed" \
    test -L "$link.removed" -a ! -e "$link"
if [ -n "$sys_ok" ]; then
    check "the system nginx -t passes after dpkg -r" $nginx -t -q
fi

dpkg_wait --purge "$pkg" | sed 's/^/# /'
check "dpkg --purge: dpkg knows no $pkg" eval '! known'
check "no $link, no $link.removed" \
    test ! -e "$link" -a ! -L "$link" -a ! -L "$link.removed"
left=
while read -r path; do
    [ -d "$path" ] && continue
    if [ -e "$path" ] || [ -L "$path" ]; then
        left="$left $path"
    fi
done < "$tmp/pkg.paths"
for path in /usr/share/doc/$pkg /var/lib/dpkg/info/$pkg.list; do
    [ -e "$path" ] && left="$left $path"
done
check "no file of the package is left (of $(wc -l < "$tmp/pkg.paths"))" \
    test -z "$left"
ours=

if [ -n "$sys_ok" ]; then
    check "the system nginx -t passes after the purge" $nginx -t -q
fi

echo "1..$tests"
echo "make test-deb: all $tests passed in $(($(date +%s) - start)) s"
