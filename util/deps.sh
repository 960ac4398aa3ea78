#!/bin/sh
# Installs the Debian packages a target needs, and nothing when they are
# all there already.
#
#   util/deps.sh run    what make and make run need: the build, nginx,
#                       redis-server (the examples' demo backend is nginx)
#   util/deps.sh        all that and what make test needs: the echo module,
#                       perl's test modules, curl; python3-grpcio for the
#                       gRPC client of t/165, python3-redis for the example
#                       consumer of idem_unknown_stream
#                       (util/unknown-consumer.py, t/171), chromium for the
#                       timeline page in t/176, prometheus for promtool
#                       (t/071: the metrics' format, the shipped rules),
#                       protobuf-compiler and python3-protobuf for the
#                       OTLP test collector (t/lib/otlp_collector.py, t/210);
#                       then puppeteer-core, which drives that chromium in
#                       t/177 (npm ci in t/browser, from its committed
#                       package-lock.json, into t/browser/node_modules:
#                       gitignored; puppeteer-core downloads no browser),
#                       with node and npm from Debian where there are none
#   util/deps.sh --list [run]   prints the packages, installs nothing
#
# IDEM_REAL_TN=1 adds the perl modules that OpenResty's Test::Nginx needs
# beyond the bundled harness's (HACKING.md: the real Test::Nginx)
set -e

list=
if [ "$1" = --list ]; then
    list=1
    shift
fi

pkgs="nginx nginx-dev libhiredis-dev uuid-dev libssl-dev libpcre2-dev
      zlib1g-dev libjson-c-dev redis-server"

if [ "$1" != run ]; then
    pkgs="$pkgs libnginx-mod-http-echo perl libtest-base-perl
          libtest-longstring-perl libhttp-message-perl curl python3
          python3-grpcio python3-redis chromium prometheus
          protobuf-compiler python3-protobuf"
    # Debian's node and npm, unless a node with its own npm is there
    command -v npm >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
fi

# t/177's puppeteer-core, once its lock file is newer than what npm put
# in node_modules (npm ci installs exactly the lock file's versions)
browser() {
    [ "$1" = run ] && return 0
    dir=$(cd "$(dirname "$0")/../t/browser" && pwd)
    [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ] \
        && return 0
    echo "npm ci in t/browser (puppeteer-core)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

# nginx's own tests (make nginx-tests) load every dynamic module nginx -V
# names; these are not in the nginx package
if [ -n "$NGINX_TESTS" ]; then
    pkgs="$pkgs libnginx-mod-http-geoip libnginx-mod-http-image-filter
          libnginx-mod-http-perl libnginx-mod-http-xslt-filter
          libnginx-mod-mail libnginx-mod-stream libnginx-mod-stream-geoip"
fi

# the real Test::Nginx (its lib/ on PERL5LIB): List::MoreUtils, and
# IPC::Run for its curl client (--- http2)
if [ -n "$IDEM_REAL_TN" ]; then
    pkgs="$pkgs liblist-moreutils-perl libipc-run-perl"
fi

if [ -n "$TEST_NGINX_USE_VALGRIND" ]; then
    pkgs="$pkgs valgrind"
fi

# make test-deb: lintian, and autopkgtest to run debian/tests
if [ -n "$IDEM_DEB" ]; then
    pkgs="$pkgs lintian autopkgtest"
fi

# make fuzz: clang and its libFuzzer, ASan and UBSan runtimes; objcopy and
# ar (binutils) for nginx's objects (fuzz/nginx.sh)
if [ -n "$IDEM_FUZZ" ]; then
    pkgs="$pkgs clang libclang-rt-14-dev binutils"
fi

if [ -n "$list" ]; then
    echo $pkgs
    exit 0
fi

missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' \
        || missing="$missing $p"
done

if [ -z "$missing" ]; then
    browser "$1"
    exit 0
fi

echo "installing:$missing"

if [ "$(id -u)" != 0 ]; then
    sudo=sudo
fi

export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# policy-rc.d keeps the packages' own nginx and redis services from starting
$sudo sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d \
             && chmod +x /usr/sbin/policy-rc.d'
$sudo apt-get install -y -qq --no-install-recommends $missing \
    || { $sudo rm -f /usr/sbin/policy-rc.d; exit 1; }
$sudo rm -f /usr/sbin/policy-rc.d
browser "$1"
