#!/bin/bash
# nginx's own test suite with the module loaded, run twice: without and
# with "idem on;" in the http block.  Prints the tests that fail only with
# idem on, and any alert or crash.  HACKING.md ("nginx's own tests") says why
# each remaining one fails.
#
#   NGINX_TESTS=/path/to/nginx-tests util/nginx-tests.sh [FILE.t ...]
#
# NGINX_TESTS is a checkout of https://github.com/nginx/nginx-tests, kept
# outside this repository.  Default files: the upstream-related ones.
# IDEM_MODULE picks another build of the module (default build/...so).
# NGINX_TESTS_IDEM is what "on" puts in http{} (default "idem on;"), e.g.
# with idem_breaker and idem_retry_budget set too, to run their code.
set -e
cd "$(dirname "$0")/.."
root=$PWD

: "${NGINX_TESTS:?set NGINX_TESTS to a checkout of nginx/nginx-tests}"
tests=$(cd "$NGINX_TESTS" && pwd)
module=${IDEM_MODULE:-$root/build/ngx_http_idem_module.so}
jobs=${NGINX_TESTS_JOBS:-2}
out=${NGINX_TESTS_OUT:-$root/build/nginx-tests}

[ -f "$module" ] || { echo "no $module: run make first"; exit 1; }

cd "$tests"

if [ $# -eq 0 ]; then
    set -- proxy*.t upstream*.t auth_request.t ssi.t mirror.t \
           h2_proxy_ssl.t h2_proxy_request_buffering_ssl.t grpc_ssl.t
fi

# as root, workers must run as root to open the tests' temporary files
user=
[ "$(id -u)" = 0 ] && user="user root;"

export TEST_NGINX_BINARY=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
export TEST_NGINX_MODULES=${TEST_NGINX_MODULES:-/usr/lib/nginx/modules}
export TEST_NGINX_GLOBALS="$user load_module $module;"

rm -rf "$out" && mkdir -p "$out/off" "$out/on"

run() {
    local mode=$1 http=$2

    printf '%s\n' "$@" | tail -n +3 \
    | TEST_NGINX_GLOBALS_HTTP="$http" xargs -P "$jobs" -I{} \
        sh -c 'timeout 300 perl "$1" > "$2/$1.tap" 2>&1; echo "exit $?" >> "$2/$1.tap"' \
        sh {} "$out/$mode"
}

echo "nginx-tests: $# files, idem off ..."
run off "" "$@"
echo "nginx-tests: $# files, idem on ..."
run on "${NGINX_TESTS_IDEM:-idem on;}" "$@"

# "not ok" lines (TODO ones are expected failures) per file and test name
perl -e '
    my ($out, @files) = @ARGV;
    my (%fail, %nostart);
    for my $mode (qw(off on)) {
        for my $f (@files) {
            open my $fh, "<", "$out/$mode/$f.tap" or next;
            while (<$fh>) {
                # a file whose nginx never started checked nothing
                $nostart{"$f ($mode): $1"} = 1
                    if /^nginx: \[emerg\] (.*)/ && !/Can.t start/;
                next unless /^not ok \d+ (?:- )?(.*)$/;
                my $name = $1;
                next if $name =~ /# TODO/;
                $fail{$mode}{"$f: $name"} = 1;
            }
        }
    }
    my @only = sort grep { !$fail{off}{$_} } keys %{ $fail{on} };
    my @fixed = sort grep { !$fail{on}{$_} } keys %{ $fail{off} };
    printf "failing without idem: %d, with idem on: %d, only with idem on: %d\n",
           scalar keys %{ $fail{off} }, scalar keys %{ $fail{on} },
           scalar @only;
    print "  $_\n" for @only;
    my @alerts = grep { /no alerts|no sanitizer/ } @only;
    print "alerts or crashes with idem on: ", scalar @alerts, "\n";
    # a module not installed fails the run; a file written for a newer
    # nginx (a directive or variable this one lacks) is only named
    my @nomodule = sort grep { /dlopen/ } keys %nostart;
    my @other = sort grep { !/dlopen/ } keys %nostart;
    if (@nomodule) {
        print "a module is missing, so these files checked nothing",
              " (make deps NGINX_TESTS=... installs them):\n";
        print "  $_\n" for @nomodule;
    }
    if (@other) {
        print "nginx did not start with the configuration of these files",
              " (written for another nginx):\n";
        print "  $_\n" for @other;
    }
    exit(@alerts ? 2 : @nomodule ? 3 : 0);
' "$out" "$@"
