#!/bin/bash
# Builds nginx <version> from ../shared/nginx-src (snapshots of nginx's
# repository at release tags, beside this repository), with
# echo-nginx-module (the suite's backends) and this module as dynamic
# modules, into build/nginx-<version>/:
#
#     build/nginx-<version>/objs/nginx
#     build/nginx-<version>/objs/ngx_http_echo_module.so
#     build/nginx-<version>/objs/ngx_http_idem_module.so
#
# nginx and echo are unpacked, configured and built once (configure runs
# again only when this module's config changes); later runs rebuild only
# what changed in this module.  <version> is 1.30.4, or "stable" / "mainline"
# for the newest even / odd minor version there.  Prints the version built.
#
# Exit status: 0 built, 1 failed, 2 skipped (no ../shared/nginx-src).
set -e
cd "$(dirname "$0")/.."
root=$PWD

archives=${NGINX_ARCHIVES:-$root/../shared/nginx-src}
want=$1

if [ -z "$want" ]; then
    echo "usage: $0 <nginx version> | stable | mainline" >&2
    exit 1
fi

if [ ! -d "$archives" ]; then
    echo "skipped: nginx $want: no nginx sources in $archives" >&2
    exit 2
fi

versions=$(cd "$archives" && ls nginx-*.tar.gz 2>/dev/null \
           | sed -n 's/^nginx-\([0-9.]*\)\.tar\.gz$/\1/p' | sort -V)

case $want in
stable)   version=$(echo "$versions" | awk -F. '$2 % 2 == 0' | tail -1) ;;
mainline) version=$(echo "$versions" | awk -F. '$2 % 2 == 1' | tail -1) ;;
*)        version=$want ;;
esac

if [ -z "$version" ] || [ ! -f "$archives/nginx-$version.tar.gz" ]; then
    echo "no nginx $want in $archives; there are:" $versions >&2
    exit 1
fi

echo_archive=$(ls "$archives"/echo-nginx-module-*.tar.gz 2>/dev/null \
               | sort -V | tail -1)

if [ -z "$echo_archive" ]; then
    echo "no echo-nginx-module-*.tar.gz in $archives" >&2
    exit 1
fi

dir=$root/build/nginx-$version
src=$dir/src
objs=$dir/objs
log=$dir/build.log

# the flags of Debian's and nginx.org's packages; configure adds -Werror
cflags="-g -O2 -fstack-protector-strong -Wformat -Werror=format-security"
cflags="$cflags -fPIC -D_FORTIFY_SOURCE=2"

# what the suite uses (http2 listeners, auth_request, gzip) and what the
# distributions' packages have, as dynamic-module-compatible builds
if [ ! -f "$dir/.unpacked" ]; then
    rm -rf "$dir"
    mkdir -p "$src" "$dir/echo"
    tar -xzf "$archives/nginx-$version.tar.gz" -C "$src" --strip-components=1
    tar -xzf "$echo_archive" -C "$dir/echo" --strip-components=1
    touch "$dir/.unpacked"
fi

lua_newer=$(find ngx_idem_module -name '*.lua' -newer "$objs/Makefile" \
            2>/dev/null | head -1)
if [ ! -f "$objs/Makefile" ] || [ config -nt "$objs/Makefile" ] \
   || [ util/build-nginx.sh -nt "$objs/Makefile" ] \
   || [ -n "$lua_newer" ]; then
    echo "configuring nginx $version (log: build/nginx-$version/build.log)" >&2

    (cd "$src" && auto/configure \
        --prefix="$dir" --builddir="$objs" \
        --with-compat --with-debug --with-threads --with-pcre-jit \
        --with-http_ssl_module --with-http_v2_module \
        --with-http_auth_request_module --with-http_realip_module \
        --with-http_stub_status_module --with-http_slice_module \
        --with-http_dav_module --with-http_gunzip_module \
        --with-http_sub_module --with-http_addition_module \
        --with-stream --with-stream_ssl_module \
        --with-poll_module \
        --with-cc-opt="$cflags" --with-ld-opt="-Wl,-z,relro -Wl,-z,now" \
        --add-dynamic-module="$dir/echo" \
        --add-dynamic-module="$root") > "$log" 2>&1 \
    || { tail -20 "$log" >&2; exit 1; }
fi

if [ ! -x "$objs/nginx" ]; then
    echo "building nginx $version (once)" >&2
fi

make -j2 -f "$objs/Makefile" -C "$src" build >> "$log" 2>&1 \
    || { grep -B2 -A8 -m5 'error' "$log" >&2 || tail -30 "$log" >&2; exit 1; }

echo "$version"
