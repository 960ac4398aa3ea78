#!/bin/bash
# Starts the quickstart gateway in the foreground: nginx with
# conf-examples/quickstart.conf on 127.0.0.1:8080 (its demo backend on
# 127.0.0.1:8081) and a local redis-server on 127.0.0.1:6380.
# Ctrl-C stops all of it.
set -e
cd "$(dirname "$0")/.."
root=$PWD
prefix=$root/run

mkdir -p "$prefix/logs" "$prefix/redis"
ln -sfn "$root/build" "$prefix/modules"

redis-server --bind 127.0.0.1 --port 6380 --save '' --appendonly no \
    --dir "$prefix/redis" --maxmemory-policy noeviction \
    --logfile "$prefix/redis/redis.log" --daemonize no &
redis_pid=$!

nginx_pid=
stop() {
    trap - INT TERM EXIT
    [ -n "$nginx_pid" ] && kill -QUIT "$nginx_pid" 2>/dev/null || true
    kill "$redis_pid" 2>/dev/null || true
    wait 2>/dev/null
    echo "stopped"
}
trap stop INT TERM EXIT

conf=$root/conf-examples/quickstart.conf
/usr/sbin/nginx -t -q -p "$prefix/" -c "$conf" -e "$prefix/logs/error.log"

/usr/sbin/nginx -p "$prefix/" -c "$conf" -e "$prefix/logs/error.log" \
    -g 'daemon off;' &
nginx_pid=$!

cat <<MSG
gateway:  http://127.0.0.1:8080  (conf-examples/quickstart.conf)
logs:     run/logs/error.log, run/logs/access.log
try:      curl -si http://127.0.0.1:8080/orders
Ctrl-C stops nginx and redis.
MSG

wait "$nginx_pid"
