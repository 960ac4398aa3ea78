#!/bin/bash
# Runs the suite with the module built with AddressSanitizer (and UBSan).
# Debian's nginx is not instrumented, so libasan is preloaded into it; the
# reports go to files, and any report fails the run.  Extra arguments go
# to prove, as with util/test.sh.
set -e
cd "$(dirname "$0")/.."
root=$PWD
build=$root/build-asan

make --no-print-directory BUILD="$build" \
    IDEM_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" \
    >/dev/null

reports=$root/t/servroot-asan
rm -rf "$reports" && mkdir -p "$reports"

libasan=$(gcc -print-file-name=libasan.so)
libubsan=$(gcc -print-file-name=libubsan.so)

# leaks are valgrind's job: nginx itself keeps memory until exit
cat > "$reports/nginx" <<SH
#!/bin/sh
LD_PRELOAD="$libasan $libubsan" \\
ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:log_path=$reports/asan \\
UBSAN_OPTIONS=print_stacktrace=1:log_path=$reports/ubsan \\
exec /usr/sbin/nginx "\$@"
SH
chmod +x "$reports/nginx"

status=0
TEST_NGINX_BINARY=$reports/nginx \
TEST_NGINX_LOAD_MODULES="$build/ngx_http_idem_module.so \
/usr/lib/nginx/modules/ngx_http_echo_module.so" \
    util/test.sh "$@" || status=$?

if ls "$reports"/asan.* "$reports"/ubsan.* >/dev/null 2>&1; then
    echo "sanitizer reports:"
    cat "$reports"/asan.* "$reports"/ubsan.* 2>/dev/null | head -100
    exit 1
fi

echo "no sanitizer reports"
exit $status
