#!/bin/bash
# make test-deb: the Debian package on this machine's nginx, from build to
# purge.
#
#   make deb; lintian (no errors); the control fields; make install lays
#   out the same files; dpkg -i; the system "nginx -t" with the
#   modules-enabled link; a private nginx (its own conf, pid, logs, temp
#   dirs, on 127.0.0.1:$TEST_DEB_PORT, 6090, and the port after it) loads
#   the module through that link and serves calls with "idem on"; dpkg -i
#   again (the link stays, or stays deleted); dpkg -r; dpkg --purge; no
#   file of the package is left and nginx still starts.
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
so=/usr/lib/nginx/modules/ngx_http_idem_module.so
port=${TEST_DEB_PORT:-6090}
backend_port=$((port + 1))
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

# what lintian and the HTTP checks need besides the build dependencies
missing=
for p in lintian curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' \
        || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends $missing
fi

# refuse before building: this test installs and purges the package
if known; then
    echo "$pkg is on this machine already; \"make test-deb\" installs"
    echo "and purges it: remove it first (dpkg --purge $pkg)"
    exit 1
fi

tmp=$(mktemp -d /tmp/idem-test-deb.XXXXXX)
# the workers (nobody) reach the temp dirs under it
chmod 755 "$tmp"
ours=

cleanup() {
    local pid
    for pid in "$tmp"/*/nginx.pid; do
        if [ -f "$pid" ]; then
            kill -QUIT "$(cat "$pid")" 2>/dev/null || true
        fi
    done
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
deb=$root/build/deb/${pkg}_${version}_$arch.deb
changes=$root/build/deb/${pkg}_${version}_$arch.changes
check "make deb built ${deb#"$root"/}" test -f "$deb"

# lintian: errors fail the test, the rest is listed
lintian --fail-on error --display-info "$changes" \
    > "$tmp/lintian.txt" 2>&1 || lintian_status=$?
grep -v 'running with root privileges' "$tmp/lintian.txt" | sed 's/^/# /'
tags="$(grep -c '^E:' "$tmp/lintian.txt" || true) errors"
tags="$tags, $(grep -c '^W:' "$tmp/lintian.txt" || true) warnings"
tags="$tags, $(grep -c '^I:' "$tmp/lintian.txt" || true) infos"
check "lintian: no errors ($tags)" test "${lintian_status:-0}" = 0

depends=$(dpkg-deb -f "$deb" Depends)
echo "# Depends: $depends"
abi=$(sed -n 's/^nginx:abi=//p' \
      /usr/share/nginx/src/debian/libnginx-mod.abisubstvars)
check "Depends: $abi, the ABI of nginx-dev" \
    grep -qE "(^|, )$abi(,|$)" <<< "$depends"
check "this machine's nginx provides $abi" \
    grep -qE "(^|, )$abi(,|$)" <<< "$(dpkg-query -W -f='${Provides}' nginx)"
for lib in libhiredis libuuid1 libssl3; do
    check "Depends: $lib (shlibs)" grep -q "$lib" <<< "$depends"
done

# make install puts the same files at the same paths; the package adds
# its copyright and changelog, and gzips README.md
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' \
    | sed 's/\.gz$//' | grep -vE '/(copyright|changelog)$' | sort \
    > "$tmp/deb.files"
make -s -C "build/deb/$pkg-$version" install DESTDIR="$tmp/destdir" \
    IDEM_ENABLE=no > /dev/null
(cd "$tmp/destdir" && find . ! -type d | sed 's/^\.//' | sort) \
    > "$tmp/install.files"
n=$(wc -l < "$tmp/deb.files")
check "make install and the package: the same $n files" \
    diff -u "$tmp/deb.files" "$tmp/install.files"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ".$avail" > "$tmp/deb-mod.conf"
check "make install and the package: the same mod-http-idem.conf" \
    cmp -s "$tmp/deb-mod.conf" "$tmp/destdir$avail"

# ------------------------------------------------------------- install

sys_t=$($nginx -t 2>&1) && sys_ok=yes || sys_ok=
[ -n "$sys_ok" ] \
    || echo "# the system \"nginx -t\" fails before the test: $sys_t"

ours=yes
dpkg_wait -i "$deb" | sed 's/^/# /'
check "dpkg -i: $pkg is installed" installed
check "$link -> $avail" test "$(readlink "$link")" = "$avail"
check "$so is the built module" cmp -s "$so" \
    "build/deb/$pkg-$version/debian/$pkg$so"
if [ -n "$sys_ok" ]; then
    check "the system nginx -t passes with the module enabled" \
        $nginx -t -q
    check "the system nginx.conf loads the module (nginx -T)" \
        grep -q '^load_module modules/ngx_http_idem_module.so;' \
        <<< "$($nginx -T 2>/dev/null)"
fi

# a private nginx: the default prefix, so that "modules/" in the
# package's load_module line means what it means to the system nginx
private_conf() {
    local dir=$1 load=$2 idem=$3
    mkdir -p "$dir"
    cat > "$dir/nginx.conf" <<EOF
$load
worker_processes  1;
pid               $dir/nginx.pid;
error_log         $dir/error.log info;

events {
    worker_connections  64;
}

http {
    access_log             $dir/access.log;
    client_body_temp_path  $dir/client_body;
    proxy_temp_path        $dir/proxy;
    fastcgi_temp_path      $dir/fastcgi;
    uwsgi_temp_path        $dir/uwsgi;
    scgi_temp_path         $dir/scgi;

    server {
        listen  127.0.0.1:$port;

        location /orders {
            $idem
            proxy_pass  http://127.0.0.1:$backend_port;
        }
    }

    server {
        listen  127.0.0.1:$backend_port;

        location / {
            set     \$id   "call_id=\$http_x_call_id";
            set     \$src  "source=\$http_x_call_id_source";
            return  200 "\$id \$src attempt=\$http_x_call_attempt\n";
        }
    }
}
EOF
}

# start DIR: nginx with DIR/nginx.conf, until it answers
start_nginx() {
    local _
    $nginx -c "$1/nginx.conf" -e "$1/error.log" || return 1
    for _ in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$backend_port/" && return 0
        sleep 0.1
    done
    return 1
}

stop_nginx() {
    local pid _
    pid=$(cat "$1/nginx.pid" 2>/dev/null) || return 0
    kill -QUIT "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$1/nginx.pid"; return 0; }
        sleep 0.1
    done
    return 1
}

gw=$tmp/idem
private_conf "$gw" "include $link;" "idem  on;"
check "nginx -t: a conf with \"idem on\", the module from $link" \
    $nginx -t -q -c "$gw/nginx.conf" -e "$gw/error.log"
check "the private nginx starts on 127.0.0.1:$port" start_nginx "$gw"

curl -s -i --max-time 5 -H 'X-Call-Id: deb-call-1' \
    "http://127.0.0.1:$port/orders" | tr -d '\r' > "$tmp/call1"
sed 's/^/# /' "$tmp/call1"
check "a call with X-Call-Id: 200" grep -q '^HTTP/1.1 200' "$tmp/call1"
check "the client's X-Call-Id comes back" \
    grep -qx 'X-Call-Id: deb-call-1' "$tmp/call1"
check "the backend got the call id, from the client, attempt 1" \
    grep -qx 'call_id=deb-call-1 source=client attempt=1' "$tmp/call1"

curl -s -i --max-time 5 "http://127.0.0.1:$port/orders" | tr -d '\r' \
    > "$tmp/call2"
id=$(sed -n 's/^X-Call-Id: //p' "$tmp/call2")
check "a call without an id gets one from the gateway (${id:-none})" \
    grep -qx "call_id=$id source=gateway attempt=1" <<< \
    "$(grep '^call_id=' "$tmp/call2")"
check "the private nginx stops" stop_nginx "$gw"
check "no [error], [crit], [alert] or [emerg] in its error.log" \
    test -z "$(grep -E '\[(error|crit|alert|emerg)\]' "$gw/error.log")"

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
check "a conf that includes $link fails nginx -t now" \
    eval "! $nginx -t -q -c $gw/nginx.conf -e $gw/error.log 2>/dev/null"

plain=$tmp/plain
private_conf "$plain" "" ""
check "nginx still starts (a private conf without the module)" \
    start_nginx "$plain"
check "and answers" grep -q '^call_id= ' <<< \
    "$(curl -s --max-time 5 "http://127.0.0.1:$port/orders")"
check "and stops" stop_nginx "$plain"

echo "1..$tests"
echo "make test-deb: all $tests passed in $(($(date +%s) - start)) s"
