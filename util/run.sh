#!/bin/bash
# Starts one of conf-examples/ in the foreground, with what it needs: its
# redis-server (a Redis Cluster of 3 masters and 3 replicas for
# redis-cluster.conf) and a demo backend in place of its upstreams.
# Ctrl-C stops all of it.
#
#   EXAMPLE   the file of conf-examples/, without .conf (quickstart)
#   PORT          the gateway's port (8080)
#   BACKEND_PORT  the demo backend's (8081)
#   REDIS_PORT    the redis-server's (6380); a cluster takes it and the
#                 next 5, and their bus ports 100 above
#   RUN_DIR       nginx's prefix, logs included (run/EXAMPLE)
#   RUN_CONF_ONLY=1   print the example as this run would write it and
#                     start nothing (t/009 reads it)
#
# The example is copied into RUN_DIR with these ports in place of the
# ones it names (127.0.0.1:8080 for the gateway, 127.0.0.1:8081 and
# 127.0.0.1:9xxx for its upstreams, 127.0.0.1:6379 or 6380 and
# 10.0.0.1x:6379 for Redis) and the built module's path in load_module.
# Ports are checked before anything starts: a taken one is one line that
# names it, and the exit status is 1.
set -e
cd "$(dirname "$0")/.."
root=$PWD

example=${EXAMPLE:-quickstart}
port=${PORT:-8080}
backend_port=${BACKEND_PORT:-8081}
redis_port=${REDIS_PORT:-6380}
module=${IDEM_MODULE:-$root/build/ngx_http_idem_module.so}
nginx=${NGINX_BIN:-/usr/sbin/nginx}

die() {
    echo "make run: $*" >&2
    exit 1
}

src=$root/conf-examples/$example.conf
if [ ! -f "$src" ]; then
    names=$(cd conf-examples && ls *.conf | sed 's/\.conf$//' | tr '\n' ' ')
    die "no example '$example' in conf-examples/ (EXAMPLE= one of: $names)"
fi

for v in PORT:$port BACKEND_PORT:$backend_port REDIS_PORT:$redis_port; do
    case ${v#*:} in
        ''|*[!0-9]*) die "${v%%:*}=${v#*:} is not a port number" ;;
    esac
    [ "${v#*:}" -ge 1 ] && [ "${v#*:}" -le 65535 ] \
        || die "${v%%:*}=${v#*:} is out of range (1-65535)"
done

[ -f "$module" ] || die "the module is not built ($module): run make"

# what the example needs: its Redis (none, one, a cluster), its password
conf_text=$(grep -v '^[[:space:]]*#' "$src")
redis=none
if grep -qE '^[[:space:]]*idem_redis[[:space:]]+cluster' <<<"$conf_text"; then
    redis=cluster
elif grep -qE '^[[:space:]]*idem_redis[[:space:]]' <<<"$conf_text"; then
    redis=single
fi
password=$(grep -oE '(^|[[:space:]])password=[^[:space:];]+' <<<"$conf_text" \
           | head -1 | sed 's/.*password=//')
# quickstart.conf serves its own demo backend (listen 127.0.0.1:8081)
own_backend=no
grep -qE 'listen[[:space:]]+127\.0\.0\.1:8081;' <<<"$conf_text" \
    && own_backend=yes

# every port this run listens on, with the variable that moves it
ports=("$port PORT")
ports+=("$backend_port BACKEND_PORT")
case $redis in
single)
    ports+=("$redis_port REDIS_PORT") ;;
cluster)
    [ $((redis_port + 105)) -le 65535 ] \
        || die "REDIS_PORT=$redis_port leaves no room for the cluster's" \
               "nodes and buses (REDIS_PORT+105 is over 65535)"
    for i in 0 1 2 3 4 5; do
        ports+=("$((redis_port + i)) REDIS_PORT (node REDIS_PORT+$i)")
        ports+=("$((redis_port + 100 + i)) REDIS_PORT (bus +$((100 + i)))")
    done ;;
esac

seen=" "
for p in "${ports[@]}"; do
    n=${p%% *}
    case $seen in
        *" $n "*)
            die "port $n is given twice: PORT, BACKEND_PORT, REDIS_PORT" \
                "(a cluster's REDIS_PORT+1..5, +100..105) must differ" ;;
    esac
    seen="$seen$n "
done

# SO_REUSEADDR as nginx and redis-server bind: a port in TIME_WAIT is free
port_free() {
    perl -MIO::Socket::INET -e '
        IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0],
                              Listen => 1, ReuseAddr => 1) or exit 1' "$1"
}

for p in "${ports[@]}"; do
    [ -n "${RUN_CONF_ONLY:-}" ] && break
    n=${p%% *}
    var=${p#* }
    port_free "$n" \
        || die "port $n is already in use on 127.0.0.1: choose another" \
               "with ${var%% *}=... (e.g. make run ${var%% *}=$((n + 100)))"
done

prefix=${RUN_DIR:-$root/run/$example}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
rm -rf "$prefix/logs" "$prefix/redis" "$prefix/backend"
mkdir -p "$prefix/logs" "$prefix/redis"

# the example with this run's ports and module: each address it names
# becomes a mark first, then the marks the ports, so that a port put in
# is never taken for one the example names (PORT=9090 is not an
# upstream's 9xxx, nor BACKEND_PORT=6380 the example's Redis)
conf=$prefix/$example.conf
sed -E \
    -e "s|^(\s*load_module\s+)modules/ngx_http_idem_module\.so;|\1$module;|" \
    -e "s/127\.0\.0\.1:8080\b/@RUN_PORT@/g" \
    -e "s/127\.0\.0\.1:(8081|9[0-9]{3})\b/@RUN_BACKEND@/g" \
    -e "s/127\.0\.0\.1:63(79|80)\b/@RUN_REDIS_0@/g" \
    -e "s/10\.0\.0\.11:6379\b/@RUN_REDIS_0@/g" \
    -e "s/10\.0\.0\.12:6379\b/@RUN_REDIS_1@/g" \
    -e "s/10\.0\.0\.13:6379\b/@RUN_REDIS_2@/g" \
    -e "s/@RUN_PORT@/127.0.0.1:$port/g" \
    -e "s/@RUN_BACKEND@/127.0.0.1:$backend_port/g" \
    -e "s/@RUN_REDIS_0@/127.0.0.1:$redis_port/g" \
    -e "s/@RUN_REDIS_1@/127.0.0.1:$((redis_port + 1))/g" \
    -e "s/@RUN_REDIS_2@/127.0.0.1:$((redis_port + 2))/g" \
    "$src" > "$conf"

if [ -n "${RUN_CONF_ONLY:-}" ]; then
    cat "$conf"
    exit 0
fi

pids=()
nginx_pid=
backend_pid=
stop() {
    trap - INT TERM EXIT
    [ -n "$nginx_pid" ] && kill -QUIT "$nginx_pid" 2>/dev/null || true
    [ -n "$backend_pid" ] && kill -QUIT "$backend_pid" 2>/dev/null || true
    # Redis last: the gateway's last writes land, and it logs no lost link
    [ -n "$nginx_pid" ] && wait "$nginx_pid" 2>/dev/null || true
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null
    echo "stopped"
}
# Ctrl-C or a TERM: a clean stop, exit 0; any other end: its own status
trap 'stop; exit 0' INT TERM
trap stop EXIT

cli() {
    local p=$1
    shift
    REDISCLI_AUTH=$password redis-cli -p "$p" "$@" 2>/dev/null
}

redis_start() {
    local p=$1 dir=$prefix/redis/$1
    shift
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no \
        --dir "$dir" --maxmemory-policy noeviction \
        --logfile "$dir/redis.log" --daemonize no \
        ${password:+--requirepass "$password" --masterauth "$password"} \
        "$@" &
    pids+=($!)
    # up to a minute: a loaded machine (a CI run beside it) is slow to start
    for i in $(seq 600); do
        [ "$(cli "$p" ping)" = PONG ] && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    die "redis-server on $p does not start: see $dir/redis.log"
}

case $redis in
single)
    redis_start "$redis_port" ;;
cluster)
    nodes=
    for i in 0 1 2 3 4 5; do
        p=$((redis_port + i))
        redis_start "$p" --cluster-enabled yes \
            --cluster-port $((p + 100)) --cluster-config-file nodes.conf \
            --cluster-node-timeout 2000 --cluster-require-full-coverage no
        nodes="$nodes 127.0.0.1:$p"
    done
    REDISCLI_AUTH=$password redis-cli --cluster create $nodes \
        --cluster-replicas 1 --cluster-yes > "$prefix/redis/create.log" 2>&1 \
        || die "redis-cli --cluster create failed:" \
               "see $prefix/redis/create.log"
    # every master with its replica: the durable claims wait for one
    for i in $(seq 900); do
        ok=0
        for j in 0 1 2 3 4 5; do
            info=$(cli $((redis_port + j)) cluster info)
            case $info in *cluster_state:ok*) ok=$((ok + 1)) ;; esac
        done
        linked=$(for j in 0 1 2 3 4 5; do
                     cli $((redis_port + j)) info replication
                 done | grep -c 'master_link_status:up' || true)
        [ "$ok" = 6 ] && [ "$linked" = 3 ] && break
        sleep 0.1
    done
    [ "$ok" = 6 ] && [ "$linked" = 3 ] \
        || die "the Redis Cluster is not ready after 90 s: see $prefix/redis/"
    ;;
esac

if [ $own_backend = no ]; then
    mkdir -p "$prefix/backend/logs"
    sed -E "s/127\.0\.0\.1:8081\b/127.0.0.1:$backend_port/" \
        util/demo-backend.conf > "$prefix/backend/demo-backend.conf"
    "$nginx" -q -p "$prefix/backend/" -c "$prefix/backend/demo-backend.conf" \
        -e "$prefix/backend/logs/error.log" -g 'daemon off;' &
    backend_pid=$!
fi

"$nginx" -t -q -p "$prefix/" -c "$conf" -e "$prefix/logs/error.log"
"$nginx" -p "$prefix/" -c "$conf" -e "$prefix/logs/error.log" \
    -g 'daemon off;' &
nginx_pid=$!

# the banner once both answer (up to a minute)
for i in $(seq 600); do
    kill -0 "$nginx_pid" 2>/dev/null \
        || die "nginx stopped: see ${prefix#$root/}/logs/error.log"
    up=yes
    for p in "$port" "$backend_port"; do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { up=no; silent=$p; }
    done
    [ $up = yes ] && break
    sleep 0.1
done
[ $up = yes ] \
    || die "nothing answers on $silent after a minute: see" \
           "$prefix/logs/error.log" \
           "${backend_pid:+and $prefix/backend/logs/error.log}"

rel=${prefix#$root/}
echo "gateway:  http://127.0.0.1:$port  (conf-examples/$example.conf)"
echo "backend:  http://127.0.0.1:$backend_port  (a demo: it answers with" \
     "the headers it got)"
case $redis in
single)  echo "redis:    127.0.0.1:$redis_port" ;;
cluster) echo "redis:    a cluster, 127.0.0.1:$redis_port" \
              "to $((redis_port + 5))" ;;
esac
echo "logs:     $rel/logs/error.log, $rel/logs/access.log"
# the example's first calls, as its header writes them (a line ending in
# a backslash goes on)
awk '/^#[ \t]+curl / { on = 1; sub(/^#[ \t]+/, "try:      ") }
     on { if (!/^try:/) sub(/^#[ \t]*/, "              "); print;
          on = /\\$/ }' "$src" \
    | sed -E "s/127\.0\.0\.1:8080\b/127.0.0.1:$port/g"
echo "Ctrl-C stops it all."

wait "$nginx_pid"
