#!/bin/bash
# Builds nginx's own objects for the fuzz targets, once, from
# ../shared/nginx-src (the newest stable version there, as
# util/build-nginx.sh picks "stable"), with the fuzz targets' compiler and
# sanitizers, into build/fuzz-nginx-<version>/:
#
#     objs/ngx_auto_config.h ...   the headers' configuration
#     libnginx.a                   every object of nginx, nginx.o's main
#                                  renamed ngx_http_idem_fuzz_nginx_main
#     libs                         the libraries nginx links with
#
# configured without this module (a target includes the module's .c files
# it fuzzes), with what the module's headers need: http, http_v2, ssl,
# pcre2, threads, debug, as Debian's package has them.  -DNGX_DEBUG_PALLOC=1
# makes every pool allocation a malloc() of its own, so that ASan sees a
# read past one; -fsanitize=fuzzer-no-link gives nginx's code coverage
# counters without a second main.
#
# Prints the build directory.  Exit status: 0 built, 1 failed, 2 skipped
# (no ../shared/nginx-src).
set -e
cd "$(dirname "$0")/.."
root=$PWD

archives=${NGINX_ARCHIVES:-$root/../shared/nginx-src}
cc=${FUZZ_CC:-clang}

if [ ! -d "$archives" ]; then
    echo "skipped: make fuzz: no nginx sources in $archives" >&2
    exit 2
fi

version=$(cd "$archives" && ls nginx-*.tar.gz 2>/dev/null \
          | sed -n 's/^nginx-\([0-9.]*\)\.tar\.gz$/\1/p' | sort -V \
          | awk -F. '$2 % 2 == 0' | tail -1)

if [ -z "$version" ]; then
    echo "no stable nginx-*.tar.gz in $archives" >&2
    exit 1
fi

dir=$root/build/fuzz-nginx-$version
src=$dir/src
objs=$dir/objs
lib=$dir/libnginx.a
log=$dir/build.log

# the flags of the fuzz targets (Makefile's FUZZ_CFLAGS), without libFuzzer's
# main; nginx's configure adds -Werror
cflags="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined"
cflags="$cflags -fno-sanitize-recover=all -fsanitize=fuzzer-no-link"
cflags="$cflags -DNGX_DEBUG_PALLOC=1"

# UBSan checks nginx's code as it checks the module's, but two: nginx passes
# NULL with length 0 to memcpy() (an empty r->args in a debug line), and
# negates INT64_MIN in ngx_vslprintf() ("%L" of a Redis integer), both
# harmless in nginx as it is compiled, both reported from any caller
cflags="$cflags -fno-sanitize=nonnull-attribute,signed-integer-overflow"

if [ -f "$lib" ] && [ "$(cat "$dir/cflags" 2>/dev/null)" = "$cc $cflags" ]
then
    echo "$dir"
    exit 0
fi

if [ ! -f "$dir/.unpacked" ]; then
    rm -rf "$dir"
    mkdir -p "$src"
    tar -xzf "$archives/nginx-$version.tar.gz" -C "$src" --strip-components=1
    touch "$dir/.unpacked"
fi

start=$(date +%s)

if [ ! -f "$objs/Makefile" ] \
   || [ "$(cat "$dir/cflags" 2>/dev/null)" != "$cc $cflags" ]; then
    rm -f "$lib"
    echo "configuring nginx $version for the fuzz targets" \
         "(log: build/fuzz-nginx-$version/build.log)" >&2

    (cd "$src" && CC=$cc auto/configure \
        --prefix="$dir" --builddir="$objs" \
        --with-cc="$cc" --with-compat --with-debug --with-threads \
        --with-http_ssl_module --with-http_v2_module \
        --with-http_realip_module --with-http_auth_request_module \
        --with-cc-opt="$cflags" \
        --with-ld-opt="-fsanitize=address,undefined") > "$log" 2>&1 \
    || { tail -20 "$log" >&2; exit 1; }

    echo "$cc $cflags" > "$dir/cflags"
fi

echo "building nginx $version's objects for the fuzz targets (once)" >&2

make -j2 -f "$objs/Makefile" -C "$src" build >> "$log" 2>&1 \
    || { grep -B2 -A8 -m5 'error' "$log" >&2 || tail -30 "$log" >&2; exit 1; }

# libFuzzer has the program's main: nginx.o's is renamed, so that what
# nginx.o defines besides it (ngx_core_module, its directives) is nginx's
rm -f "$lib.tmp"
objcopy --redefine-sym main=ngx_http_idem_fuzz_nginx_main \
    "$objs/src/core/nginx.o" "$objs/nginx-nomain.o"
find "$objs/src" -name '*.o' ! -path '*/core/nginx.o' -print0 \
    | xargs -0 ar rcs "$lib.tmp" "$objs/ngx_modules.o" "$objs/nginx-nomain.o"

# the libraries of nginx's own link line (pcre2, ssl, crypto, zlib, ...)
sed -n '/ngx_modules\.o \\$/{n;p;}' "$objs/Makefile" | tr ' \t' '\n\n' \
    | grep '^-l' | tr '\n' ' ' > "$dir/libs"

mv "$lib.tmp" "$lib"

echo "nginx $version's objects built in $(( $(date +%s) - start )) s" >&2
echo "$dir"
