#!/bin/bash
# Dedupe throughput with one Redis and with a 3-master Redis Cluster, side
# by side in one run, and the Redis CPU each call costs on each master.
#
#   bench/bench-cluster.sh     (make bench runs it after bench/bench.sh)
#
# It starts, under build/bench-cluster/run/: a backend (nginx without the
# module, return 200), one redis-server, a 3-master cluster (redis-server
# --cluster-enabled yes, redis-cli --cluster create) and two gateways, one
# worker each, a dedupe location each (idem on; idem_dedupe on;
# idem_dedupe_scope off; generated call ids): "single" on the one Redis,
# "cluster" on the cluster.  Then wrk rounds, interleaved; per variant the
# median req/s and p99, and the CPU time (utime + stime, /proc/PID/stat)
# each Redis process spent per call during the measured runs.  A report,
# not a test.
#
# Environment: BENCH_ROUNDS=3, BENCH_DURATION=5, BENCH_CONNECTIONS=32,
# NGINX_BIN=/usr/sbin/nginx.

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bench=$root/build/bench-cluster
run=$bench/run
result=$bench/result.txt
module=$root/build/ngx_http_idem_module.so
nginx=${NGINX_BIN:-/usr/sbin/nginx}

rounds=${BENCH_ROUNDS:-3}
duration=${BENCH_DURATION:-5}
conns=${BENCH_CONNECTIONS:-32}
hz=$(getconf CLK_TCK)

die() { echo "bench-cluster: $*" >&2; exit 1; }
note() { echo "bench-cluster: $*"; }

for v in rounds duration conns; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a number >= 1"
done
[ -f "$module" ] || die "no $module (run make first)"
for c in wrk redis-server redis-cli curl; do
    command -v "$c" >/dev/null || die "no $c (make deps, make bench)"
done

mkdir -p "$bench"
exec 9>"$bench/.lock"
flock -n 9 || die "another bench/bench-cluster.sh is running on this tree"
rm -rf "$run" "$result"
mkdir -p "$run"

pids=()
stop_all() {
    local rc=$? i pid
    trap - EXIT INT TERM
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    exit "$rc"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

in_use() { ss -Htan "sport = :$1" 2>/dev/null | grep -q .; }

# a free port p with p + 1, p + 2 and their cluster bus ports (+ 100) free
taken=" "
free_port() {
    local p k ok
    for _ in $(seq 200); do
        p=$((30000 + RANDOM % 20000))
        ok=1
        for k in 0 1 2 100 101 102; do
            if in_use $((p + k)) || [[ $taken == *" $((p + k)) "* ]]; then
                ok=0
            fi
        done
        [ $ok = 1 ] || continue
        for k in 0 1 2 100 101 102; do taken="$taken$((p + k)) "; done
        echo "$p"
        return 0
    done
    die "no free port found"
}

backend_port=$(free_port)
single_port=$(free_port)
cluster_port=$(free_port)
gw_single=$(free_port)
gw_cluster=$(free_port)

start_redis() {    # port [cluster]
    local d=$run/redis-$1
    mkdir -p "$d"
    if [ "${2:-}" = cluster ]; then
        set -- "$1" --cluster-enabled yes --cluster-port $(($1 + 100)) \
            --cluster-config-file nodes.conf --cluster-node-timeout 5000
    else
        set -- "$1"
    fi
    redis-server --bind 127.0.0.1 --port "$@" --save '' --appendonly no \
        --maxmemory-policy noeviction --dir "$d" \
        --logfile "$d/redis.log" --daemonize no &
    pids+=($!)
    echo $! > "$d/pid"
}

wait_ping() {
    for _ in $(seq 50); do
        [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    die "redis on $1 does not answer"
}

start_redis "$single_port"
for k in 0 1 2; do start_redis $((cluster_port + k)) cluster; done
for p in "$single_port" "$cluster_port" $((cluster_port + 1)) \
         $((cluster_port + 2)); do
    wait_ping "$p"
done
redis-cli --cluster create 127.0.0.1:"$cluster_port" \
    127.0.0.1:$((cluster_port + 1)) 127.0.0.1:$((cluster_port + 2)) \
    --cluster-yes > "$run/cluster-create.log" 2>&1 \
    || { cat "$run/cluster-create.log"; die "redis-cli --cluster create"; }
for _ in $(seq 100); do
    redis-cli -p "$cluster_port" cluster info | grep -q cluster_state:ok \
        && break
    sleep 0.1
done

temp_paths() {
    local t
    for t in client_body proxy fastcgi uwsgi scgi; do
        echo "    ${t}_temp_path $1/${t}_temp;"
    done
}

start_nginx() {    # name: $run/name/nginx.conf
    local d=$run/$1
    "$nginx" -t -q -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" \
        > "$d/nginx-t.log" 2>&1 \
        || { cat "$d/nginx-t.log" >&2; die "$1: nginx -t failed"; }
    "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" \
        -g 'daemon off;' 2> "$d/start.log" &
    pids+=($!)
}

mkdir -p "$run/backend"
cat > "$run/backend/nginx.conf" <<EOF
worker_processes 1;
pid $run/backend/nginx.pid;
error_log $run/backend/error.log warn;
events { worker_connections 1024; }
http {
$(temp_paths "$run/backend")
    access_log off;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$backend_port;
        location / { return 200 "ok\n"; }
    }
}
EOF
start_nginx backend

gateway() {    # name port idem_redis-line
    mkdir -p "$run/$1"
    cat > "$run/$1/nginx.conf" <<EOF
load_module $module;
worker_processes 1;
pid $run/$1/nginx.pid;
error_log $run/$1/error.log warn;
events { worker_connections 1024; }
http {
$(temp_paths "$run/$1")
    access_log off;
    keepalive_requests 1000000;
    $3;
    upstream backend {
        server 127.0.0.1:$backend_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$2;
        location / {
            idem on;
            idem_dedupe on;
            idem_dedupe_scope off;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://backend;
        }
    }
}
EOF
    start_nginx "$1"
}

gateway single "$gw_single" "idem_redis 127.0.0.1:$single_port"
gateway cluster "$gw_cluster" \
    "idem_redis cluster 127.0.0.1:$cluster_port 127.0.0.1:$((cluster_port + 1))"

for p in "$gw_single" "$gw_cluster"; do
    for _ in $(seq 50); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' \
             "http://127.0.0.1:$p/" 2>/dev/null)" = 200 ] && break
        sleep 0.1
    done
done

note "one Redis :$single_port, cluster :$cluster_port-$((cluster_port + 2))," \
     "$rounds rounds x ${duration}s, $conns connections"

cpu_ticks() {    # pid: utime + stime
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# redis pids by name: single, c0, c1, c2
declare -A rpid
rpid[single]=$(cat "$run/redis-$single_port/pid")
for k in 0 1 2; do
    rpid[c$k]=$(cat "$run/redis-$((cluster_port + k))/pid")
done

declare -A reqs ticks
rps_single=() rps_cluster=() p99_single=() p99_cluster=()

measure() {    # variant port
    local v=$1 port=$2 out n t0 t1 k name
    declare -A before
    for name in "${!rpid[@]}"; do before[$name]=$(cpu_ticks "${rpid[$name]}"); done
    out=$(wrk -t1 -c"$conns" -d"${duration}s" --latency \
              "http://127.0.0.1:$port/" 2>&1)
    n=$(awk '/requests in/ { print $1 }' <<< "$out")
    reqs[$v]=$(( ${reqs[$v]:-0} + n ))
    for name in "${!rpid[@]}"; do
        t1=$(cpu_ticks "${rpid[$name]}")
        ticks[$v.$name]=$(( ${ticks[$v.$name]:-0} + t1 - ${before[$name]} ))
    done
    eval "rps_$v+=(\"$(awk '/Requests\/sec/ { print $2 }' <<< "$out")\")"
    # p99 in ms, whatever unit wrk chose
    eval "p99_$v+=(\"$(awk '$1 == "99%" {
        v = $2 + 0; u = $2; sub(/^[0-9.]+/, "", u);
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000;
        print v }' <<< "$out")\")"
    grep -q "Non-2xx" <<< "$out" \
        && note "$v: $(grep Non-2xx <<< "$out")" || true
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 }
    END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# warm-up
wrk -t1 -c"$conns" -d1s "http://127.0.0.1:$gw_single/" > /dev/null 2>&1
wrk -t1 -c"$conns" -d1s "http://127.0.0.1:$gw_cluster/" > /dev/null 2>&1
reqs=() ticks=()

for r in $(seq "$rounds"); do
    measure single "$gw_single"
    measure cluster "$gw_cluster"
done

us_per_call() {    # variant name
    awk -v t="${ticks[$1.$2]:-0}" -v n="${reqs[$1]}" -v hz="$hz" \
        'BEGIN { printf "%.1f", n ? t * 1000000 / hz / n : 0 }'
}

{
    echo "dedupe (idem_dedupe on, scope off, generated ids), one gateway"
    echo "worker each, $rounds rounds x ${duration}s, wrk -c$conns:"
    echo
    printf '%-8s %10s %10s   %s\n' variant req/s "p99 (ms)" \
           "Redis CPU per call (us)"
    printf '%-8s %10s %10s   %s\n' single "$(median "${rps_single[@]}")" \
           "$(median "${p99_single[@]}")" \
           "one Redis $(us_per_call single single)"
    printf '%-8s %10s %10s   %s\n' cluster "$(median "${rps_cluster[@]}")" \
           "$(median "${p99_cluster[@]}")" \
           "masters $(us_per_call cluster c0) + $(us_per_call cluster c1) + $(us_per_call cluster c2)"
    echo
    echo "keys: one Redis $(redis-cli -p "$single_port" dbsize)," \
         "masters $(redis-cli -p "$cluster_port" dbsize)" \
         "$(redis-cli -p $((cluster_port + 1)) dbsize)" \
         "$(redis-cli -p $((cluster_port + 2)) dbsize)"
    echo "bytes per record (MEMORY USAGE of one key): one Redis" \
         "$(redis-cli -p "$single_port" memory usage \
                "$(redis-cli -p "$single_port" randomkey)")," \
         "cluster $(redis-cli -p "$cluster_port" memory usage \
                "$(redis-cli -p "$cluster_port" randomkey)")"
} | tee "$result"
