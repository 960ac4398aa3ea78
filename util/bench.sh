#!/bin/bash
# Throughput/latency cost of the module: the same proxy route measured
# side by side, with and without the module, in one run.
#
#   util/bench.sh          (make bench: builds the module first)
#
# It starts, under build/bench/run/ (all temp paths, pid files and logs
# there):
#   - a backend: nginx without the module, 1 worker, return 200 "ok\n";
#   - a redis-server (--save '' --appendonly no, noeviction);
#   - the gateway: nginx, 1 worker, the module loaded, access_log off, with
#     locations that proxy to the backend through the same keepalive
#     upstream:
#       plain   proxy_pass, proxy_set_header X-Call-Id $request_id
#       idem    idem on
#       record  idem on; idem_record on          (idem_redis at http level)
#       dedupe  idem on; idem_record on; idem_dedupe on; idem_dedupe_scope off
#     "record" and "dedupe" are probed with nginx -t first and skipped, with
#     a note, while the module does not know their directives.
# all on free loopback ports, then runs wrk against each variant,
# interleaved (a warm-up, then rounds of a,b,c,d,a,b,c,d,...), without an
# X-Call-Id so that the module generates the ids, and prints the median
# req/s and p99 latency per variant, their ratios to "plain" and the
# targets (idem >= 0.97, record >= 0.85 of plain's req/s). The table also
# goes to build/bench/result.txt. It is a report, not a test: it exits 0
# whether the targets are met or not (non-zero only when it cannot run).
#
# Environment:
#   BENCH_ROUNDS=3        measured rounds per variant (median over them)
#   BENCH_DURATION=5      seconds per wrk run
#   BENCH_WARMUP=2        seconds of warm-up per variant (not measured)
#   BENCH_CONNECTIONS=32  wrk -c (wrk runs with -t1)
#   BENCH_PIN=0           1: wrk on one CPU, nginx x2 + redis on another
#   NGINX_BIN=/usr/sbin/nginx
#
# CPU pinning (BENCH_PIN): off by default. On a 2-core shared machine,
# pinning wrk to one core and gateway + backend + redis to the other makes
# the gateway and backend workers time-slice on a single core (about 60 %
# of the unpinned req/s), and when a neighbour's work lands on the pinned
# core the scheduler cannot move ours away. Tried side by side (3 runs
# each, 5 rounds x 5 s): unpinned, the per-round req/s varied by 5-11 %
# (coefficient of variation), pinned by 10-20 %. So the three busy
# processes are left to the scheduler; BENCH_PIN=1 is kept to compare.

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bench=$root/build/bench
run=$bench/run
result=$bench/result.txt
module=$root/build/ngx_http_idem_module.so
nginx=${NGINX_BIN:-/usr/sbin/nginx}

rounds=${BENCH_ROUNDS:-3}
duration=${BENCH_DURATION:-5}
warmup=${BENCH_WARMUP:-2}
conns=${BENCH_CONNECTIONS:-32}
pin=${BENCH_PIN:-0}

die() { echo "bench: $*" >&2; exit 1; }
note() { echo "bench: $*"; }

for v in rounds duration warmup conns; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, not '${!v}'"
done
if [ "$rounds" -lt 1 ] || [ "$duration" -lt 1 ] || [ "$conns" -lt 1 ]; then
    die "BENCH_ROUNDS, BENCH_DURATION and BENCH_CONNECTIONS must be >= 1"
fi

[ -x "$nginx" ] || die "no $nginx (make deps)"
[ -f "$module" ] || die "no $module (run make first)"
command -v redis-server >/dev/null || die "no redis-server (make deps)"
command -v curl >/dev/null || die "no curl (make deps)"

if ! command -v wrk >/dev/null; then
    note "installing wrk"
    sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq wrk
    command -v wrk >/dev/null || die "wrk is still missing"
fi

# one bench at a time on this tree
mkdir -p "$bench"
exec 9>"$bench/.lock"
flock -n 9 || die "another util/bench.sh is running on this tree"
rm -rf "$run" "$result"
mkdir -p "$run"

# ---------------------------------------------------------------- cleanup

pids=()        # everything we started, in start order
stop_all() {
    local rc=$? pid i
    trap - EXIT INT TERM
    # stop in reverse order: wrk, gateway, backend, redis
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            note "pid $pid did not stop on TERM, killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    exit "$rc"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- CPUs

# allowed CPUs of this process, expanded ("0-2,5" -> "0 1 2 5")
cpus=()
if command -v taskset >/dev/null; then
    list=$(taskset -cp $$ 2>/dev/null | sed 's/.*: *//')
    for part in ${list//,/ }; do
        if [[ $part == *-* ]]; then
            for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
        else
            cpus+=("$part")
        fi
    done
fi
pin_srv=() pin_wrk=()
if [ "$pin" = 1 ]; then
    [ "${#cpus[@]}" -ge 2 ] || die "BENCH_PIN=1 needs taskset and 2 CPUs"
    pin_srv=(taskset -c "${cpus[0]}")
    pin_wrk=(taskset -c "${cpus[1]}")
    note "pinning: nginx + redis on CPU ${cpus[0]}, wrk on CPU ${cpus[1]}"
fi

# ---------------------------------------------------------------- ports

# ports other tools of this project (and its neighbours) use
reserved() {
    local p=$1
    case $p in 1984|1985|8080|8081|6380|16379|16380|16479|16480) return 0;; esac
    [ "$p" -ge 19900 ] && [ "$p" -le 19999 ] && return 0
    [ "$p" -ge 26379 ] && [ "$p" -le 26399 ] && return 0
    return 1
}
in_use() {
    if command -v ss >/dev/null; then
        ss -Htan "sport = :$1" 2>/dev/null | grep -q .
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}
taken=" "
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 30000))
        reserved "$p" && continue
        [[ $taken == *" $p "* ]] && continue
        in_use "$p" && continue
        taken="$taken$p "
        echo "$p"
        return 0
    done
    die "no free port found"
}
backend_port=$(free_port)
redis_port=$(free_port)
gateway_port=$(free_port)

# ---------------------------------------------------------------- helpers

# the five temp paths of one nginx instance, inside its own directory
temp_paths() {
    local d=$1 t
    for t in client_body proxy fastcgi uwsgi scgi; do
        echo "    ${t}_temp_path $d/${t}_temp;"
    done
}

wait_http() {    # url: wait until it answers 200 (5 s)
    for _ in $(seq 50); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null)" = 200 ] \
            && return 0
        sleep 0.1
    done
    return 1
}

redis_cmd() {
    if command -v redis-cli >/dev/null; then
        redis-cli -h 127.0.0.1 -p "$redis_port" "$@" 2>/dev/null
    else
        # inline command over /dev/tcp, first reply line only
        local reply
        exec 3<>"/dev/tcp/127.0.0.1/$redis_port" || return 1
        printf '%s\r\n' "$*" >&3
        IFS= read -r -t 2 reply <&3 || true
        exec 3<&- 3>&-
        reply=${reply%$'\r'}
        echo "${reply#[+:]}"
    fi
}

start_nginx() {    # name conf: start nginx in the foreground of a job
    local name=$1 conf=$2 out
    if ! out=$("${pin_srv[@]}" "$nginx" -t -q -p "$run/$name/" -c "$conf" \
                -e "$run/$name/error.log" 2>&1); then
        echo "$out" >&2
        die "$name: nginx -t failed on $conf"
    fi
    "${pin_srv[@]}" "$nginx" -p "$run/$name/" -c "$conf" \
        -e "$run/$name/error.log" -g 'daemon off;' &
    pids+=($!)
}

# ---------------------------------------------------------------- backend

mkdir -p "$run/backend"
cat > "$run/backend/nginx.conf" <<EOF
# bench backend: no module, the smallest answer
worker_processes  1;
pid               $run/backend/nginx.pid;
error_log         $run/backend/error.log warn;

events {
    worker_connections  1024;
}

http {
$(temp_paths "$run/backend")
    access_log          off;
    keepalive_timeout   65;
    keepalive_requests  1000000;

    server {
        listen  127.0.0.1:$backend_port;

        location / {
            default_type  text/plain;
            return        200 "ok\n";
        }
    }
}
EOF
start_nginx backend "$run/backend/nginx.conf"

# ---------------------------------------------------------------- redis

mkdir -p "$run/redis"
"${pin_srv[@]}" redis-server --bind 127.0.0.1 --port "$redis_port" \
    --save '' --appendonly no --maxmemory-policy noeviction \
    --dir "$run/redis" --pidfile "$run/redis/redis.pid" \
    --logfile "$run/redis/redis.log" --daemonize no &
pids+=($!)

# ---------------------------------------------------------------- gateway

# which variants this build of the module can run: nginx -t on a small
# config with the variant's directives
probe() {    # name http-directives location-directives
    local d=$run/probe-$1 out
    mkdir -p "$d"
    cat > "$d/nginx.conf" <<EOF
load_module  $module;
pid          $d/nginx.pid;
error_log    $d/error.log;
events { }
http {
$(temp_paths "$d")
    $2
    server {
        listen  127.0.0.1:$gateway_port;
        location / {
            $3
            return 200;
        }
    }
}
EOF
    if out=$("$nginx" -t -q -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" 2>&1)
    then
        return 0
    fi
    probe_error=$(echo "$out" | grep -m1 'emerg' \
                  | sed 's/^.*\[emerg\] //; s/ in [^ ]*:[0-9]*$//')
    [ -n "$probe_error" ] || probe_error=$(echo "$out" | head -1)
    return 1
}

variants=(plain idem)
declare -A skipped=()

record_http="idem_redis 127.0.0.1:$redis_port;"
probe idem "" "idem on;" \
    || die "the module does not accept 'idem on': $probe_error"
if probe record "$record_http" "idem on; idem_record on;"; then
    variants+=(record)
else
    skipped[record]="skipped: idem_record/idem_redis not accepted ($probe_error)"
    note "record: ${skipped[record]}"
fi
if probe dedupe "$record_http" \
        "idem on; idem_record on; idem_dedupe on; idem_dedupe_scope off;"; then
    variants+=(dedupe)
else
    skipped[dedupe]="skipped: idem_dedupe/idem_dedupe_scope not accepted ($probe_error)"
    note "dedupe: ${skipped[dedupe]}"
fi

redis_line=
if [ -n "${skipped[record]:-}" ] && [ -n "${skipped[dedupe]:-}" ]; then
    redis_line="# (idem_redis: no variant uses it with this build)"
else
    redis_line=$record_http
fi
loc_record='' loc_dedupe=''
[[ " ${variants[*]} " == *" record "* ]] && loc_record="
        location /record {
            idem         on;
            idem_record  on;
            proxy_pass   http://backend;
        }"
[[ " ${variants[*]} " == *" dedupe "* ]] && loc_dedupe="

        location /dedupe {
            idem               on;
            idem_record        on;
            idem_dedupe        on;
            idem_dedupe_scope  off;
            proxy_pass         http://backend;
        }"

mkdir -p "$run/gateway"
cat > "$run/gateway/nginx.conf" <<EOF
# bench gateway: the same proxy route with and without the module
load_module       $module;
worker_processes  1;
pid               $run/gateway/nginx.pid;
error_log         $run/gateway/error.log warn;

events {
    worker_connections  4096;
}

http {
$(temp_paths "$run/gateway")
    access_log          off;
    keepalive_timeout   65;
    keepalive_requests  1000000;

    $redis_line

    upstream backend {
        server              127.0.0.1:$backend_port;
        keepalive           32;
        keepalive_requests  1000000;
    }

    server {
        listen  127.0.0.1:$gateway_port;

        proxy_http_version  1.1;
        proxy_set_header    Connection "";

        location /plain {
            # a location's own proxy_set_header replaces the inherited ones
            proxy_set_header  Connection "";
            proxy_set_header  X-Call-Id \$request_id;
            proxy_pass        http://backend;
        }

        location /idem {
            idem        on;
            proxy_pass  http://backend;
        }
$loc_record$loc_dedupe
    }
}
EOF

# redis first: the gateway may connect to it at start
for _ in $(seq 50); do
    [ "$(redis_cmd PING)" = PONG ] && break
    sleep 0.1
done
[ "$(redis_cmd PING)" = PONG ] \
    || { tail -5 "$run/redis/redis.log" >&2; die "redis-server did not start"; }

wait_http "http://127.0.0.1:$backend_port/" \
    || { tail -5 "$run/backend/error.log" >&2; die "backend did not start"; }

start_nginx gateway "$run/gateway/nginx.conf"
gateway_pid=${pids[-1]}

# every variant answers 200 "ok" through the gateway; the module's ones
# hand a generated X-Call-Id back
for v in "${variants[@]}"; do
    url=http://127.0.0.1:$gateway_port/$v
    wait_http "$url" \
        || { tail -5 "$run/gateway/error.log" >&2; die "$v: $url is not 200"; }
    resp=$(curl -si "$url")
    [[ $resp == *$'\r\n\r\nok' ]] || die "$v: unexpected answer: $resp"
    if [ "$v" != plain ] && ! grep -qi '^x-call-id:' <<<"$resp"; then
        die "$v: no X-Call-Id in the answer, is the module on? $resp"
    fi
done

note "backend 127.0.0.1:$backend_port, redis 127.0.0.1:$redis_port," \
     "gateway 127.0.0.1:$gateway_port; variants: ${variants[*]}"
[ "${#pin_srv[@]}" -gt 0 ] || note "no CPU pinning (BENCH_PIN=1 to pin)"

# ---------------------------------------------------------------- wrk

mkdir -p "$run/wrk"
wrk_run() {    # variant seconds outfile
    "${pin_wrk[@]}" wrk -t1 -c"$conns" -d"$2"s --latency \
        "http://127.0.0.1:$gateway_port/$1" > "$3" 2>&1 &
    pids+=($!)
    wait "${pids[-1]}" || { cat "$3" >&2; die "wrk failed on $1"; }
    unset 'pids[-1]'
    kill -0 "$gateway_pid" 2>/dev/null \
        || { tail -5 "$run/gateway/error.log" >&2; die "the gateway died"; }
}

# wrk output -> "req/s p99-ms non-2xx socket-errors"
wrk_parse() {
    awk '
        /^Requests\/sec:/ { rps = $2 }
        $1 == "99%" {
            v = $2; u = v; sub(/^[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
            p99 = (u == "us") ? v / 1000 : (u == "ms") ? v : \
                  (u == "s") ? v * 1000 : (u == "m") ? v * 60000 : -1
        }
        /Non-2xx or 3xx responses:/ { non2xx = $NF }
        /Socket errors:/ {
            n = split($0, f, /[ ,]+/)
            for (i = 1; i <= n; i++) if (f[i] ~ /^[0-9]+$/) sockerr += f[i]
        }
        END {
            if (rps == "") rps = -1
            if (p99 == "") p99 = -1
            printf "%s %s %d %d\n", rps, p99, non2xx, sockerr
        }' "$1"
}

total=$(( ${#variants[@]} * (warmup + rounds * duration) ))
note "${#variants[@]} variants: ${warmup}s warm-up each, then $rounds" \
     "round(s) of ${duration}s, wrk -t1 -c$conns (about ${total}s)"

if [ "$warmup" -gt 0 ]; then
    for v in "${variants[@]}"; do
        wrk_run "$v" "$warmup" "$run/wrk/$v-warmup.txt"
    done
fi

for ((r = 1; r <= rounds; r++)); do
    line="round $r:"
    for v in "${variants[@]}"; do
        out=$run/wrk/$v-$r.txt
        wrk_run "$v" "$duration" "$out"
        read -r rps p99 non2xx sockerr < <(wrk_parse "$out")
        echo "$v $r $rps $p99 $non2xx $sockerr" >> "$run/wrk/all.txt"
        line="$line $v $rps/s p99 ${p99}ms"
        [ "$non2xx" = 0 ] && [ "$sockerr" = 0 ] \
            || line="$line (non-2xx $non2xx, socket errors $sockerr)"
        line="$line;"
    done
    note "${line%;}"
done

# ---------------------------------------------------------------- report

median() {
    sort -g | awk '{ a[NR] = $1 }
        END { if (NR == 0) print -1
              else if (NR % 2) print a[(NR + 1) / 2]
              else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

gw_alerts=$(grep -c '\[alert\]\|\[crit\]\|\[emerg\]' "$run/gateway/error.log" \
            2>/dev/null || true)
keys=
if [[ " ${variants[*]} " == *" record "* ]]; then
    keys=$(redis_cmd DBSIZE || true)
fi

{
    echo "ngx_http_idem_module benchmark  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "nginx $("$nginx" -v 2>&1 | sed 's/.*nginx\///'), wrk -t1 -c$conns," \
         "$rounds round(s) x ${duration}s per variant, interleaved," \
         "median over rounds; $(nproc) CPUs," \
         "pinning $([ "$pin" = 1 ] && echo "on (wrk CPU ${cpus[1]}, servers CPU ${cpus[0]})" || echo off)"
    echo
    printf '%-8s %10s %8s %10s %10s %8s  %s\n' \
        variant "req/s" "p99 ms" "req/s/a" "p99/a" "spread" "errors"

    plain_rps='' plain_p99=''
    declare -A ratio=()
    for v in plain idem record dedupe; do
        if [ -n "${skipped[$v]:-}" ]; then
            printf '%-8s %s\n' "$v" "${skipped[$v]}"
            continue
        fi
        rps=$(awk -v v="$v" '$1 == v { print $3 }' "$run/wrk/all.txt" | median)
        p99=$(awk -v v="$v" '$1 == v { print $4 }' "$run/wrk/all.txt" | median)
        # (max - min) / median of the rounds' req/s: the noise, to weigh
        # the ratios against
        spread=$(awk -v v="$v" -v m="$rps" '$1 == v {
                     if (lo == "" || $3 < lo) lo = $3; if ($3 > hi) hi = $3 }
                 END { printf "%.0f%%", (m > 0 ? 100 * (hi - lo) / m : 0) }' \
                 "$run/wrk/all.txt")
        errs=$(awk -v v="$v" '$1 == v { n += $5; s += $6 }
               END { printf "non-2xx %d, socket %d", n, s }' "$run/wrk/all.txt")
        bad=$(awk -v v="$v" '$1 == v && ($5 + $6 > 0 || $3 < 0 || $4 < 0)' \
              "$run/wrk/all.txt")
        [ -z "$bad" ] || errs="$errs  INVALID"
        if [ "$v" = plain ]; then plain_rps=$rps plain_p99=$p99; fi
        read -r rr pr < <(awk -v r="$rps" -v p="$p99" \
            -v ar="$plain_rps" -v ap="$plain_p99" \
            'BEGIN { printf "%.3f %.3f\n", (ar > 0 ? r / ar : 0),
                                            (ap > 0 ? p / ap : 0) }')
        [ -z "$bad" ] && ratio[$v]=$rr
        printf '%-8s %10.1f %8.2f %10s %10s %8s  %s\n' "$v" "$rps" "$p99" \
            "$rr" "$pr" "$spread" "$errs"
    done
    echo
    echo "targets (issue): req/s ratio to plain"
    bad_plain=
    [ -n "${ratio[plain]:-}" ] || bad_plain=1
    for t in "idem 0.97" "record 0.85"; do
        read -r v min <<<"$t"
        if [ -n "${skipped[$v]:-}" ]; then
            verdict="not measured (variant skipped)"
        elif [ -n "$bad_plain" ] || [ -z "${ratio[$v]:-}" ]; then
            verdict="not judged (errors in the run)"
        elif awk -v r="${ratio[$v]}" -v m="$min" 'BEGIN { exit !(r >= m) }'; then
            verdict="met (${ratio[$v]})"
        else
            verdict="NOT met (${ratio[$v]})"
        fi
        printf '  %-9s >= %s  %s\n' "$v/a" "$min" "$verdict"
    done
    [ -z "${ratio[dedupe]:-}" ] || echo "  dedupe/a: ${ratio[dedupe]} (no target)"
    if [ -n "$keys" ]; then
        echo "redis keys after the run: $keys"
    fi
    if [ "${gw_alerts:-0}" != 0 ]; then
        echo "gateway error.log: $gw_alerts alert/crit/emerg line(s):" \
             "build/bench/run/gateway/error.log"
    fi
    echo "noise: shared 2-core machine; a ratio is only meaningful when its" \
         "distance from 1 is well above the spread column (round-to-round" \
         "(max-min)/median of req/s); more rounds (BENCH_ROUNDS) narrow it." \
         "Per-round numbers: build/bench/run/wrk/all.txt"
} | tee "$result"
