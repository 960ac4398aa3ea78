#!/bin/bash
# Runs the Test::Nginx suite against Debian's nginx with the built module,
# with a private redis-server on loopback.  Extra arguments go to prove
# (e.g. util/test.sh t/010-call-id.t); default: the whole of t/.
#
# NGINX=<version> (1.30.4, stable, mainline) runs it against that nginx
# instead, built with both modules from ../shared/nginx-src by
# util/build-nginx.sh; skipped, not failed, where those sources are absent.
set -e
cd "$(dirname "$0")/.."
root=$PWD

# nginx itself reads NGINX (sockets inherited in a binary upgrade): it
# must not see the version asked for here
want=${NGINX:-}
unset NGINX

if [ -n "$want" ]; then
    status=0
    version=$(util/build-nginx.sh "$want") || status=$?
    if [ $status -ne 0 ]; then
        # 2: no sources beside the repository (said why), not a failure
        [ $status -eq 2 ] && exit 0
        exit $status
    fi

    objs=$root/build/nginx-$version/objs
    export TEST_NGINX_BINARY=$objs/nginx
    export TEST_NGINX_LOAD_MODULES="$objs/ngx_http_idem_module.so \
$objs/ngx_http_echo_module.so"
    echo "nginx $version: $TEST_NGINX_BINARY"
fi

export TEST_NGINX_BINARY=${TEST_NGINX_BINARY:-/usr/sbin/nginx}
export TEST_NGINX_LOAD_MODULES=${TEST_NGINX_LOAD_MODULES:-"\
$root/build/ngx_http_idem_module.so \
/usr/lib/nginx/modules/ngx_http_echo_module.so"}
# the whole suite, or a list of files, with no port given: side by side in
# TEST_JOBS shards (util/test-shards.sh), each of which comes back here
if [ -z "$IDEM_TEST_QUEUE" ] && [ -z "$TEST_NGINX_PORT" ] \
   && [ "${TEST_JOBS:-3}" -gt 1 ]; then
    files=1
    for a in "$@"; do
        case $a in
            -r) ;;
            -*) files= ;;
        esac
    done
    if [ -n "$files" ]; then
        args=()
        for a in "$@"; do
            [ "$a" = -r ] || args+=("$a")
        done
        exec util/test-shards.sh "${args[@]}"
    fi
fi

# one prove (TEST_JOBS=1, or options for prove) with no port given: the
# ports of the shards' first one, from TEST_PORT_BASE as
# util/test-shards.sh lays them out, so that one variable moves all of a
# run's ports however it runs
if [ -z "$IDEM_TEST_QUEUE" ] && [ -z "$TEST_NGINX_PORT" ] \
   && [ -z "$TEST_NGINX_SERVER_PORT" ]; then
    base=${TEST_PORT_BASE:-20000}
    if [ $((base + 1000)) -gt 32768 ] || [ "$base" -lt 1024 ]; then
        echo "TEST_PORT_BASE=$base: the run's ports (TEST_PORT_BASE to" \
             "+999) must lie within 1024-32767 (the kernel gives ports" \
             "above to outgoing connections)"
        exit 2
    fi
    export TEST_NGINX_PORT=$base
    export TEST_NGINX_BACKEND_PORT=${TEST_NGINX_BACKEND_PORT:-$((base + 210))}
    export TEST_NGINX_REDIS_PORT=${TEST_NGINX_REDIS_PORT:-$((base + 250))}
    export TEST_NGINX_REDIS_FAULT_PORT=${TEST_NGINX_REDIS_FAULT_PORT:-$((base + 450))}
    export TEST_NGINX_SERVROOT=${TEST_NGINX_SERVROOT:-$root/t/servroot-shard-$base}
    echo "one prove, ports from $base (TEST_PORT_BASE)"
fi

# the plain Test::More files (their nginx run by t/lib/IdemNginx.pm) take
# their ports from the server port too
export TEST_NGINX_SERVER_PORT=${TEST_NGINX_SERVER_PORT:-${TEST_NGINX_PORT:-1984}}
export TEST_NGINX_REDIS_PORT=${TEST_NGINX_REDIS_PORT:-16379}
export TEST_NGINX_BACKEND_PORT=${TEST_NGINX_BACKEND_PORT:-16380}
# a second redis-server that t/080-redis-faults.t stops, pauses and restarts
export TEST_NGINX_REDIS_FAULT_PORT=${TEST_NGINX_REDIS_FAULT_PORT:-$((TEST_NGINX_REDIS_PORT + 200))}
export TEST_NGINX_ROOT=$root

redis_dir=$root/t/servroot-redis-$TEST_NGINX_REDIS_PORT
rm -rf "$redis_dir" && mkdir -p "$redis_dir"
redis-server --bind 127.0.0.1 --port "$TEST_NGINX_REDIS_PORT" \
    --save '' --appendonly no --dir "$redis_dir" \
    --maxmemory-policy noeviction \
    --logfile "$redis_dir/redis.log" --daemonize no &
redis_pid=$!
echo "$redis_pid" > "$redis_dir/redis.pid"

# the misbehaving backend of the retry tests (util/backend.pl)
backend_dir=$root/t/servroot-backend-$TEST_NGINX_BACKEND_PORT
# a backend an earlier run left: only if that pid is still that backend
# (pids are reused)
old=$(cat "$backend_dir.pid" 2>/dev/null) \
    && grep -qa "backend.pl.$TEST_NGINX_BACKEND_PORT" "/proc/$old/cmdline" \
       2>/dev/null \
    && kill "$old" 2>/dev/null || true
rm -rf "$backend_dir"
perl util/backend.pl "$TEST_NGINX_BACKEND_PORT" "$backend_dir" &
backend_pid=$!
echo "$backend_pid" > "$backend_dir.pid"

cleanup() {
    fault_pid=$(cat "$root/t/servroot-redis-$TEST_NGINX_REDIS_FAULT_PORT/redis.pid" 2>/dev/null) || true
    # only if it still is that redis-server (a pid file can outlive it)
    if [ -n "$fault_pid" ] \
       && grep -qa redis "/proc/$fault_pid/cmdline" 2>/dev/null; then
        kill -CONT "$fault_pid" 2>/dev/null || true
        kill "$fault_pid" 2>/dev/null || true
    fi
    kill "$redis_pid" "$backend_pid" 2>/dev/null || true
    wait "$redis_pid" "$backend_pid" 2>/dev/null || true
}
trap cleanup EXIT

for i in $(seq 100); do
    redis-cli -p "$TEST_NGINX_REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done
if ! redis-cli -p "$TEST_NGINX_REDIS_PORT" ping >/dev/null 2>&1; then
    echo "setup failed: redis-server on $TEST_NGINX_REDIS_PORT does not" \
         "answer (see $redis_dir/redis.log)"
    exit 1
fi

# a shard: the files of the queue, one prove each, until it is empty
if [ -n "$IDEM_TEST_QUEUE" ]; then
    exec 9>"$IDEM_TEST_QUEUE.lock"
    take() {
        flock 9
        f=$(head -1 "$IDEM_TEST_QUEUE")
        [ -n "$f" ] && sed -i 1d "$IDEM_TEST_QUEUE"
        flock -u 9
        [ -n "$f" ]
    }
    while take; do
        log=$IDEM_TEST_OUT/logs/$(basename "$f").log
        start=$(date +%s)
        rc=0
        prove "$f" > "$log" 2>&1 || rc=$?
        secs=$(($(date +%s) - start))
        tests=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$log")
        bad=$(sed -n 's/.*Failed \([0-9]*\)\/[0-9]* subtests.*/\1/p' "$log" \
              | awk '{ b += $1 } END { print b + 0 }')
        res=ok
        if [ $rc -ne 0 ]; then
            res=FAIL
            [ "$bad" -gt 0 ] || bad=1
        fi
        echo "$f $res ${tests:-0} $bad $secs" >> "$IDEM_TEST_OUT/results"
    done
    exit 0
fi

if [ $# -eq 0 ]; then
    set -- -r t
fi

status=0
prove "$@" || status=$?
exit $status
