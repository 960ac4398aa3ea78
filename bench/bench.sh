#!/bin/bash
# What the module costs a gateway, measured side by side in one run.
#
#   bench/bench.sh          (make bench: builds the module first)
#
# Under build/bench/run/ it starts a backend (nginx without the module,
# return 200 "ok"), a redis-server, the gateway (nginx with the module,
# one worker) and the OpenResty peer (nginx with Debian's lua module, one
# worker), all on free loopback ports.  The gateway proxies to the
# backend through one keepalive upstream, in these variants:
#
#   plain    proxy_pass
#   hdrs     proxy_pass, plus the same six upstream headers and two answer
#            headers the module sends, set with proxy_set_header and
#            add_header: what an operator would write without the module
#   hdrsid   hdrs, sent what record and dedupe are sent: a new call id per
#            call, from the same wrk script (the baseline of record)
#   idem     idem on; idem_deadline 3s
#   record   idem + idem_record on                  (a new call id per call)
#   otel     record, each call's spans exported (idem_otel_endpoint: the
#            backend answers the collector's POSTs, 200 and discarded),
#            the client's traceparent sampled        (a new call id per call)
#   dedupe   idem + idem_dedupe on, scope off        (a new call id per call)
#   dedupelim dedupe + idem_resend_limit (rate and concurrent, by client
#            address): a new id is never looked up in the limit's zone, so
#            this is what configuring it costs first calls
#                                                    (a new call id per call)
#   durable  dedupe + idem_dedupe_durable replicas=1: each claim waits for
#            the replica of Redis, on loopback (started when this variant
#            runs: every variant's writes then go to it too)
#                                                    (a new call id per call)
#   dedupe4k dedupe, a POST of a 4 KB JSON body (bench/bench-webhook.lua),
#            the id in X-Call-Id                     (a new call id per call)
#   webhook  the same bodies, the id only in the body's "id":
#            idem_call_id_json id                    (a new call id per call)
#   peer     the OpenResty peer: the claim in Lua with SET NX / GET, the
#            answer stored from a timer (bench/bench-peer.lua)
#                                                    (a new call id per call)
#
# CPUs: the gateway's and the peer's worker run alone on the last CPU;
# wrk, the backend and redis share the others (BENCH_PIN=0: no pinning).
# After a warm-up, rounds of every variant in turn (interleaved), wrk -t1;
# the report gives medians over the rounds, the ratios the goals are about
# (idem/hdrs, record/hdrsid, dedupe/peer, record's p99 over plain's;
# durable/dedupe and their p99 apart, no goal: what a durable claim costs;
# webhook/dedupe4k: what taking the id from a 4 KB body costs), and
# Redis CPU per call from INFO commandstats (reset before each run: the
# usec Redis spent on the variant's commands / the calls wrk completed).
# Every run starts on an empty Redis (FLUSHALL, outside the measured time).
#
# Throughput is the gateway's cost only while the gateway's CPU is the one
# that is full.  With 2 CPUs, wrk, the backend and Redis share the other
# one, and a variant that makes Redis work takes that CPU from wrk: so the
# report also gives the CPU time each call cost the gateway's worker and
# Redis (from /proc, over the same run), the worker's busy share, and the
# goals' ratios as the inverse ratio of worker CPU per call (what one CPU
# of gateway serves, whatever the rest of the machine does).
# It is a report, not a test: exit 0 whatever the ratios (non-zero only
# when it cannot run).  The table also goes to build/bench/result.txt.
#
# Environment:
#   BENCH_ROUNDS=5        measured rounds per variant (median over them)
#   BENCH_DURATION=5      seconds per wrk run
#   BENCH_WARMUP=2        seconds of warm-up per variant (not measured)
#   BENCH_CONNECTIONS=32  wrk -c
#   BENCH_PACE=4          the paced runs (p99 of plain and record, and of
#                         dedupe and durable, at one offered load): ms
#                         between a connection's calls; 0: none
#   BENCH_PIN=1           0: leave every process to the scheduler
#   BENCH_VARIANTS="plain hdrs hdrsid idem record dedupe dedupelim durable
#                  peer"  (dedupe4k, webhook and otel only when named here)
#   NGINX_BIN=/usr/sbin/nginx

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bench=$root/build/bench
run=$bench/run
result=$bench/result.txt
module=$root/build/ngx_http_idem_module.so
nginx=${NGINX_BIN:-/usr/sbin/nginx}
lua_module=/usr/lib/nginx/modules/ngx_http_lua_module.so
ndk_module=/usr/lib/nginx/modules/ndk_http_module.so

rounds=${BENCH_ROUNDS:-5}
duration=${BENCH_DURATION:-5}
warmup=${BENCH_WARMUP:-2}
conns=${BENCH_CONNECTIONS:-32}
pace=${BENCH_PACE:-4}
pin=${BENCH_PIN:-1}
read -r -a variants <<<"${BENCH_VARIANTS:-plain hdrs hdrsid idem record \
dedupe dedupelim durable peer}"

die() { echo "bench: $*" >&2; exit 1; }
note() { echo "bench: $*"; }

for v in rounds duration warmup conns pace; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, not '${!v}'"
done
if [ "$rounds" -lt 1 ] || [ "$duration" -lt 1 ] || [ "$conns" -lt 1 ]; then
    die "BENCH_ROUNDS, BENCH_DURATION and BENCH_CONNECTIONS must be >= 1"
fi
for v in "${variants[@]}"; do
    case $v in plain|hdrs|hdrsid|idem|record|dedupe|dedupelim|durable|peer) ;;
        dedupe4k|webhook|otel) ;;
        *) die "unknown variant '$v' in BENCH_VARIANTS" ;; esac
done

[ -x "$nginx" ] || die "no $nginx (make deps)"
[ -f "$module" ] || die "no $module (run make first)"
command -v redis-server >/dev/null || die "no redis-server (make deps)"
command -v redis-cli >/dev/null || die "no redis-cli (make deps)"
command -v curl >/dev/null || die "no curl (make deps)"

# wrk, and Debian's lua module for the OpenResty peer
need=()
command -v wrk >/dev/null || need+=(wrk)
[ -f "$lua_module" ] || need+=(libnginx-mod-http-lua lua-resty-core)
if [ "${#need[@]}" -gt 0 ]; then
    note "installing ${need[*]}"
    sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
    command -v wrk >/dev/null || die "wrk is still missing"
fi

# one bench at a time on this tree
mkdir -p "$bench"
exec 9>"$bench/.lock"
flock -n 9 || die "another bench/bench.sh is running on this tree"
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

# the gateway's worker alone on the last allowed CPU, the rest elsewhere
cpus=()
list=$(taskset -cp $$ 2>/dev/null | sed 's/.*: *//') || list=
for part in ${list//,/ }; do
    if [[ $part == *-* ]]; then
        for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
    else
        cpus+=("$part")
    fi
done
cpu_gw='' cpu_rest=''
if [ "$pin" = 1 ] && [ "${#cpus[@]}" -ge 2 ]; then
    cpu_gw=${cpus[-1]}
    cpu_rest=$(IFS=,; echo "${cpus[*]:0:${#cpus[@]}-1}")
    note "pinning: gateway and peer workers on CPU $cpu_gw;" \
         "wrk, backend and redis on CPU $cpu_rest"
elif [ "$pin" = 1 ]; then
    note "fewer than 2 CPUs: no pinning"
fi
pin_rest=()
[ -z "$cpu_rest" ] || pin_rest=(taskset -c "$cpu_rest")

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
replica_port=$(free_port)
gateway_port=$(free_port)
peer_port=$(free_port)

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

start_nginx() {    # name conf cpu: start nginx in the foreground of a job
    local name=$1 conf=$2 cpu=$3 out pin=()
    [ -z "$cpu" ] || pin=(taskset -c "$cpu")
    if ! out=$("$nginx" -t -q -p "$run/$name/" -c "$conf" \
                -e "$run/$name/error.log" 2>&1); then
        echo "$out" >&2
        die "$name: nginx -t failed on $conf"
    fi
    "${pin[@]}" "$nginx" -p "$run/$name/" -c "$conf" \
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
start_nginx backend "$run/backend/nginx.conf" "$cpu_rest"

# ---------------------------------------------------------------- redis

mkdir -p "$run/redis"
"${pin_rest[@]}" redis-server --bind 127.0.0.1 --port "$redis_port" \
    --save '' --appendonly no --maxmemory-policy noeviction \
    --dir "$run/redis" --pidfile "$run/redis/redis.pid" \
    --logfile "$run/redis/redis.log" --daemonize no &
pids+=($!)
redis_pid=$!

# the durable variant's replica
if [[ " ${variants[*]} " == *" durable "* ]]; then
    mkdir -p "$run/replica"
    "${pin_rest[@]}" redis-server --bind 127.0.0.1 --port "$replica_port" \
        --save '' --appendonly no --replicaof 127.0.0.1 "$redis_port" \
        --dir "$run/replica" --logfile "$run/replica/redis.log" \
        --daemonize no &
    pids+=($!)
fi

# ---------------------------------------------------------------- gateway

common_http() {    # the http{} lines the gateway and the peer share
    cat <<EOF
$(temp_paths "$1")
    access_log          off;
    keepalive_timeout   65;
    keepalive_requests  1000000;

    upstream backend {
        server              127.0.0.1:$backend_port;
        keepalive           32;
        keepalive_requests  1000000;
    }
EOF
}

dedupe_location() {    # uri durable [more]: a dedupe route, its claims
                       # durable or off, and more directives
    cat <<EOF
        location $1 {
            idem                  on;
            idem_deadline         3s;
            idem_call_id_missing  reject;
            idem_dedupe           on;
            idem_dedupe_scope     off;
            idem_dedupe_durable   $2;
            ${3:-}
            proxy_pass            http://backend;
        }
EOF
}

# worker_cpu_affinity's mask: the highest CPU leftmost
affinity=
[ -z "$cpu_gw" ] \
    || affinity="worker_cpu_affinity  1$(printf '%*s' "$cpu_gw" '' | tr ' ' 0);"

mkdir -p "$run/gateway"
cat > "$run/gateway/nginx.conf" <<EOF
# bench gateway: one route, with and without the module
load_module       $module;
worker_processes  1;
$affinity
pid               $run/gateway/nginx.pid;
error_log         $run/gateway/error.log warn;

events {
    worker_connections  4096;
}

http {
$(common_http "$run/gateway")

    idem_redis  127.0.0.1:$redis_port;

    # dedupelim's: wrk's calls all come from one address
    idem_resend_limit_zone  \$binary_remote_addr zone=resends:10m
                            rate=100r/s;

    log_format  paced  '\$request_time';

    # otel's spans: the backend answers them and keeps nothing; only the
    # calls that send a sampled traceparent (otel's) export any
    idem_otel_endpoint  http://127.0.0.1:$backend_port/v1/traces;

    server {
        listen  127.0.0.1:$gateway_port;

        proxy_http_version  1.1;
        proxy_set_header    Connection "";

        location /plain {
            proxy_pass  http://backend;
        }

        # what the module sends, written with nginx's own directives
        location /hdrs {
            proxy_set_header  Connection "";
            proxy_set_header  X-Call-Id \$request_id;
            proxy_set_header  X-Trace-Id \$request_id;
            proxy_set_header  X-Call-Id-Source gateway;
            proxy_set_header  X-Call-Attempt 1;
            proxy_set_header  traceparent "00-\$request_id-0123456789abcdef-01";
            proxy_set_header  X-Deadline-Ms 3000;
            add_header        X-Call-Id \$request_id;
            add_header        X-Trace-Id \$request_id;
            proxy_pass        http://backend;
        }

        location /idem {
            idem           on;
            idem_deadline  3s;
            proxy_pass     http://backend;
        }

        location /record {
            idem           on;
            idem_deadline  3s;
            idem_record    on;
            proxy_pass     http://backend;
        }

        location /otel {
            idem           on;
            idem_deadline  3s;
            idem_record    on;
            proxy_pass     http://backend;
        }

        # the paced runs: the same two, with the time each call took here
        location /paced/ {
            access_log  $run/gateway/paced.log paced;

            location /paced/plain {
                proxy_pass  http://backend;
            }

            location /paced/record {
                idem           on;
                idem_deadline  3s;
                idem_record    on;
                proxy_pass     http://backend;
            }

$(dedupe_location /paced/dedupe off)
$(dedupe_location /paced/durable replicas=1)
        }

$(dedupe_location /dedupe off)
$(dedupe_location /dedupelim off \
  'idem_resend_limit     zone=resends burst=100 concurrent=10;')
$(dedupe_location /dedupe4k off)

        # the id from the body's "id" (a 4 KB JSON delivery)
        location /webhook {
            idem                  on;
            idem_deadline         3s;
            idem_call_id_missing  reject;
            idem_call_id_json     id;
            idem_dedupe           on;
            idem_dedupe_scope     off;
            proxy_pass            http://backend;
        }

        # each claim waits until the replica has it (WAIT 1)
$(dedupe_location /durable replicas=1)
    }
}
EOF

# ---------------------------------------------------------------- peer

mkdir -p "$run/peer"
cat > "$run/peer/nginx.conf" <<EOF
# bench peer: duplicate suppression in OpenResty-style Lua
load_module       $ndk_module;
load_module       $lua_module;
worker_processes  1;
$affinity
pid               $run/peer/nginx.pid;
error_log         $run/peer/error.log warn;

events {
    worker_connections  4096;
}

http {
$(common_http "$run/peer")

    lua_package_path  "$root/bench/?.lua;;";

    server {
        listen  127.0.0.1:$peer_port;

        proxy_http_version  1.1;
        proxy_set_header    Connection "";

        location /peer {
            set  \$bench_redis  $redis_port;

            access_by_lua_block       { require("bench-peer").claim() }
            body_filter_by_lua_block  { require("bench-peer").body() }
            log_by_lua_block          { require("bench-peer").log() }

            proxy_pass  http://backend;
        }
    }
}
EOF

for _ in $(seq 50); do
    [ "$(redis_cmd PING)" = PONG ] && break
    sleep 0.1
done
[ "$(redis_cmd PING)" = PONG ] \
    || { tail -5 "$run/redis/redis.log" >&2; die "redis-server did not start"; }

# the replica in sync, and acknowledging: WAIT counts it
if [[ " ${variants[*]} " == *" durable "* ]]; then
    for _ in $(seq 100); do
        [ "$(printf 'SET bench:probe 1\r\nWAIT 1 100\r\n' \
             | redis-cli -h 127.0.0.1 -p "$redis_port" 2>/dev/null \
             | tail -1)" = 1 ] && break
        sleep 0.1
    done
    [ "$(redis_cmd WAIT 1 100)" = 1 ] \
        || { tail -5 "$run/replica/redis.log" >&2
             die "the replica does not acknowledge"; }
fi

wait_http "http://127.0.0.1:$backend_port/" \
    || { tail -5 "$run/backend/error.log" >&2; die "backend did not start"; }

start_nginx gateway "$run/gateway/nginx.conf" ""
gateway_pid=${pids[-1]}
start_nginx peer "$run/peer/nginx.conf" ""
peer_pid=${pids[-1]}

# CPU time (clock ticks, user + system) of a process, and of the one
# worker of a variant's nginx
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
ticks() {    # pid
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || { echo -1; return; }
    # the fields after the ")" of the command name: utime is the 12th
    sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
worker_ticks() {    # variant
    local master=$gateway_pid
    [ "$1" = peer ] && master=$peer_pid
    ticks "$(pgrep -P "$master" | head -1)"
}

url_of() {
    if [ "$1" = peer ]; then
        echo "http://127.0.0.1:$peer_port/peer"
    elif [ "$1" = hdrsid ]; then
        echo "http://127.0.0.1:$gateway_port/hdrs"
    else
        echo "http://127.0.0.1:$gateway_port/$1"
    fi
}

newid() {    # the variants that get a new call id on every call
    case $1 in
        hdrsid|record|otel|dedupe|dedupelim|durable|peer|dedupe4k|webhook)
            return 0 ;;
    esac
    return 1
}

# otel's client span: a sampled trace, the same for every call
otel_tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01

# every variant answers 200 "ok"; the module's hand a call id back; a
# duplicate of a deduped call is a replay
for v in "${variants[@]}"; do
    url=$(url_of "$v")
    hdr=()
    newid "$v" && hdr=(-H "X-Call-Id: probe-$v")
    [ "$v" = otel ] && hdr+=(-H "traceparent: $otel_tp")
    case $v in
        dedupe4k) hdr+=(--data-binary '{"id":"probe-dedupe4k"}') ;;
        webhook) hdr=(--data-binary '{"id":"probe-webhook"}') ;;
    esac
    for _ in $(seq 50); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "${hdr[@]}" "$url")" \
            = 200 ] && break
        sleep 0.1
    done
    resp=$(curl -si "${hdr[@]}" "$url")
    [[ $resp == *$'\r\n\r\nok' ]] || die "$v: unexpected answer: $resp"
    case $v in
        plain|peer) ;;
        *) grep -qi '^x-call-id:' <<<"$resp" \
               || die "$v: no X-Call-Id in the answer: $resp" ;;
    esac
    case $v in
        dedupe|dedupelim|durable|peer|dedupe4k|webhook)
            grep -qi '^idempotent-replayed: true' <<<"$resp" \
               || die "$v: the duplicate was not replayed: $resp" ;;
    esac
done

note "backend :$backend_port, redis :$redis_port, gateway :$gateway_port," \
     "peer :$peer_port; variants: ${variants[*]}"

# ---------------------------------------------------------------- wrk


mkdir -p "$run/wrk"
wrk_run() {    # variant seconds outfile tag [pace]: pace, ms between calls
    local v=$1 args=() p url
    url=$(url_of "$v")
    newid "$v" && args=(-s "$root/bench/bench-newid.lua" -- "$4")
    [ "$v" = otel ] && args+=("$otel_tp")
    case $v in
        dedupe4k) args=(-s "$root/bench/bench-webhook.lua" -- "$4" header) ;;
        webhook) args=(-s "$root/bench/bench-webhook.lua" -- "$4" body) ;;
    esac
    if [ -n "${5:-}" ]; then
        args=(-s "$root/bench/bench-paced.lua" -- "$5")
        newid "$v" && args+=("$4")
        url=http://127.0.0.1:$gateway_port/paced/$v
    fi
    "${pin_rest[@]}" wrk -t1 -c"$conns" -d"$2"s --latency "$url" \
        "${args[@]}" > "$3" 2>&1 &
    pids+=($!)
    wait "${pids[-1]}" || { cat "$3" >&2; die "wrk failed on $v"; }
    unset 'pids[-1]'
    for p in "$gateway_pid" "$peer_pid"; do
        kill -0 "$p" 2>/dev/null || die "a gateway died (build/bench/run)"
    done
}

# wrk output -> "req/s p99-ms non-2xx socket-errors requests"
wrk_parse() {
    awk '
        /^Requests\/sec:/ { rps = $2 }
        / requests in / { reqs = $1 }
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
            printf "%s %s %d %d %d\n", rps, p99, non2xx, sockerr, reqs
        }' "$1"
}

# INFO commandstats -> "usec calls", summed over every command but the
# bench's own (INFO, CONFIG)
redis_usec() {
    redis_cmd INFO commandstats | tr -d '\r' | awk -F'[:=,]' '
        /^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ {
            for (i = 2; i < NF; i += 2) {
                if ($i == "calls") c += $(i + 1)
                if ($i == "usec") u += $(i + 1)
            }
        }
        END { printf "%d %d\n", u, c }'
}

per_call() {    # ticks-before ticks-after calls: us of CPU per call
    awk -v a="$1" -v b="$2" -v n="$3" -v hz="$hz" 'BEGIN {
        if (a < 0 || b < 0 || n <= 0) print -1
        else printf "%.2f", (b - a) * 1e6 / hz / n }'
}

total=$(( ${#variants[@]} * (warmup + rounds * duration) ))
note "${#variants[@]} variants: ${warmup}s warm-up each, then $rounds" \
     "round(s) of ${duration}s, wrk -t1 -c$conns (about ${total}s)"

tag=b$(date +%s)
[ "$pace" = 0 ] || total=$((total + 4 * rounds * duration))
if [ "$warmup" -gt 0 ]; then
    for v in "${variants[@]}"; do
        wrk_run "$v" "$warmup" "$run/wrk/$v-warmup.txt" "$tag-w-$v"
    done
fi

for ((r = 1; r <= rounds; r++)); do
    line="round $r:"
    for v in "${variants[@]}"; do
        out=$run/wrk/$v-$r.txt
        # each run starts on an empty Redis, whatever ran before it: the
        # keys of the runs before (millions by the last round) make Redis
        # grow its tables in bursts, on wrk's CPU, which fell on whichever
        # variant ran then
        redis_cmd FLUSHALL >/dev/null
        redis_cmd CONFIG RESETSTAT >/dev/null
        t0=$(worker_ticks "$v") r0=$(ticks "$redis_pid")
        wrk_run "$v" "$duration" "$out" "$tag-$r-$v"
        # the writes of the last calls land a moment after wrk stops
        sleep 0.2
        t1=$(worker_ticks "$v") r1=$(ticks "$redis_pid")
        read -r rps p99 non2xx sockerr reqs < <(wrk_parse "$out")
        redis_cmd INFO commandstats | tr -d '\r' | grep '^cmdstat_' \
            > "$run/wrk/$v-$r.redis" || true
        read -r rusec rcalls < <(redis_usec)
        # the worker's and Redis's CPU per call, in us
        wus=$(per_call "$t0" "$t1" "$reqs")
        rcpu=$(per_call "$r0" "$r1" "$reqs")
        echo "$v $r $rps $p99 $non2xx $sockerr $reqs $rusec $rcalls $wus" \
             "$rcpu" \
            >> "$run/wrk/all.txt"
        line="$line $v $rps/s p99 ${p99}ms"
        [ "$non2xx" = 0 ] && [ "$sockerr" = 0 ] \
            || line="$line (non-2xx $non2xx, socket errors $sockerr)"
        line="$line;"
    done
    note "${line%;}"
done

# the same offered load for plain and record, well under what either
# serves: their p99 apart is what recording adds to a call's latency;
# the same for dedupe and durable (what waiting for the replica adds).
# Redis starts each run empty, as in the rounds above.  The gateway
# logs each call's $request_time, its own view of the same latency.
paced=()
for pair in "plain record" "dedupe durable"; do
    [[ " ${variants[*]} " == *" ${pair% *} "* ]] \
        && [[ " ${variants[*]} " == *" ${pair#* } "* ]] && paced+=($pair)
done
if [ "$pace" -gt 0 ] && [ "${#paced[@]}" -gt 0 ]; then
    note "paced: $conns connections, ${pace} ms between a connection's" \
         "calls (about $((conns * 1000 / pace)) calls/s offered)"
    for ((r = 1; r <= rounds; r++)); do
        line="paced round $r:"
        for v in "${paced[@]}"; do
            out=$run/wrk/$v-paced-$r.txt
            redis_cmd FLUSHALL >/dev/null
            : > "$run/gateway/paced.log"
            wrk_run "$v" "$duration" "$out" "$tag-p$r-$v" "$pace"
            read -r rps p99 non2xx sockerr reqs < <(wrk_parse "$out")
            # the gateway's p99 and p99.9 of $request_time, in ms
            read -r g99 g999 < <(sort -g "$run/gateway/paced.log" | awk '
                { t[NR] = $1 * 1000 }
                END { if (NR == 0) { print "-1 -1"; exit }
                      printf "%d %d\n", t[int(NR * 0.99) + (NR < 100)],
                             t[int(NR * 0.999) + (NR < 1000)] }')
            echo "$v $r $rps $p99 $g99 $g999" >> "$run/wrk/paced.txt"
            line="$line $v $rps/s p99 ${p99}ms (gateway ${g99}/${g999});"
        done
        note "${line%;}"
    done
fi

# ---------------------------------------------------------------- report

median() {
    sort -g | awk '{ a[NR] = $1 }
        END { if (NR == 0) print -1
              else if (NR % 2) print a[(NR + 1) / 2]
              else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

col() {    # variant column: the median of that column over the rounds
    awk -v v="$1" -v c="$2" '$1 == v { print $c }' "$run/wrk/all.txt" \
        | median
}

declare -A rps=() p99=() wus=() rcpu=()
for v in "${variants[@]}"; do
    rps[$v]=$(col "$v" 3)
    p99[$v]=$(col "$v" 4)
    wus[$v]=$(col "$v" 10)
    rcpu[$v]=$(col "$v" 11)
done

ratio() {    # a b: a/b of the req/s medians, or "-" when one is missing
    if [ -z "${rps[$1]:-}" ] || [ -z "${rps[$2]:-}" ]; then
        echo -
        return
    fi
    awk -v a="${rps[$1]}" -v b="${rps[$2]}" \
        'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "-" }'
}

cost() {    # a b: b's worker CPU per call / a's (calls one CPU serves)
    if [ -z "${wus[$1]:-}" ] || [ -z "${wus[$2]:-}" ]; then
        echo -
        return
    fi
    awk -v a="${wus[$1]}" -v b="${wus[$2]}" \
        'BEGIN { if (a > 0 && b > 0) printf "%.3f", b / a; else print "-" }'
}

alerts=$(cat "$run/gateway/error.log" "$run/peer/error.log" 2>/dev/null \
         | grep -c '\[alert\]\|\[crit\]\|\[emerg\]\|\[error\]' || true)

{
    echo "ngx_http_idem_module benchmark  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "nginx $("$nginx" -v 2>&1 | sed 's/.*nginx\///')," \
         "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo \
                           | sed 's/.*: //'))"
    echo "wrk -t1 -c$conns, $rounds round(s) x ${duration}s per variant," \
         "interleaved, medians over rounds;" \
         "$([ -n "$cpu_gw" ] && echo "gateway worker alone on CPU $cpu_gw" \
            || echo "no CPU pinning")"
    echo
    printf '%-7s %7s %6s %6s %6s %6s %6s %5s %6s %6s %5s  %s\n' \
        variant "req/s" "p99ms" /plain /hdrs spread "gw us" "busy" \
        "rd us" "rd cpu" "cmds" errors
    for v in "${variants[@]}"; do
        spread=$(awk -v v="$v" -v m="${rps[$v]}" '$1 == v {
                     if (lo == "" || $3 < lo) lo = $3; if ($3 > hi) hi = $3 }
                 END { printf "%.0f%%", (m > 0 ? 100 * (hi - lo) / m : 0) }' \
                 "$run/wrk/all.txt")
        errs=$(awk -v v="$v" '$1 == v { n += $5; s += $6 }
               END { if (n + s) printf "non-2xx %d, socket %d", n, s }' \
               "$run/wrk/all.txt")
        busy=$(awk -v u="${wus[$v]}" -v r="${rps[$v]}" 'BEGIN {
                   if (u > 0) printf "%.0f%%", u * r / 1e4; else print "-" }')
        # Redis per call: median over rounds of usec (commands) / calls
        rus=- rcc=- rcu=-
        if newid "$v" && [ "$v" != hdrsid ]; then
            rus=$(awk -v v="$v" '$1 == v && $7 > 0 {
                      printf "%.2f\n", $8 / $7 }' "$run/wrk/all.txt" | median)
            rcc=$(awk -v v="$v" '$1 == v && $7 > 0 {
                      printf "%.2f\n", $9 / $7 }' "$run/wrk/all.txt" | median)
            rcu=${rcpu[$v]}
        fi
        printf '%-7s %7.0f %6.2f %6s %6s %6s %6.1f %5s %6s %6s %5s  %s\n' \
            "$v" "${rps[$v]}" "${p99[$v]}" "$(ratio "$v" plain)" \
            "$(ratio "$v" hdrs)" "$spread" "${wus[$v]}" "$busy" "$rus" \
            "$rcu" "$rcc" "$errs"
    done
    echo
    echo "  gw us: the gateway worker's CPU per call; busy: its share of"
    echo "  its CPU; rd us: Redis command time per call (INFO"
    echo "  commandstats); rd cpu: the redis-server process's CPU per call"
    echo "  (with its network work); cmds: Redis commands per call"
    echo
    echo "goals: req/s ratio of the medians, then the same ratio from the"
    echo "worker's CPU per call (what a gateway CPU serves):"
    printf '  %-15s %-6s %7s %7s\n' "" goal "req/s" "gw cpu"
    printf '  %-15s %-6s %7s %7s\n' "idem / hdrs" ">=0.95" \
        "$(ratio idem hdrs)" "$(cost idem hdrs)"
    printf '  %-15s %-6s %7s %7s\n' "record / hdrsid" ">=0.75" \
        "$(ratio record hdrsid)" "$(cost record hdrsid)"
    printf '  %-15s %-6s %7s %7s\n' "dedupe / peer" ">=2" \
        "$(ratio dedupe peer)" "$(cost dedupe peer)"
    printf '  %-15s %-6s %7s %7s\n' "dedupelim/dedupe" ">=0.97" \
        "$(ratio dedupelim dedupe)" "$(cost dedupelim dedupe)"
    printf '  %-15s %-6s %7s %7s\n' "durable/dedupe" "-" \
        "$(ratio durable dedupe)" "$(cost dedupe durable)"
    printf '  %-15s %-6s %7s %7s\n' "webhook/dedupe4k" ">=0.91" \
        "$(ratio webhook dedupe4k)" "$(cost webhook dedupe4k)"
    printf '  %-15s %-6s %7s %7s\n' "otel / record" "<=1.10" \
        "$(ratio otel record)" "$(cost record otel)"
    if grep -q '^plain ' "$run/wrk/paced.txt" 2>/dev/null; then
        pp=$(awk '$1 == "plain" { print $4 }' "$run/wrk/paced.txt" | median)
        pr=$(awk '$1 == "record" { print $4 }' "$run/wrk/paced.txt" | median)
        qp=$(awk '$1 == "plain" { print $3 }' "$run/wrk/paced.txt" | median)
        qr=$(awk '$1 == "record" { print $3 }' "$run/wrk/paced.txt" | median)
        echo "  record p99 <= plain p99 + 1 ms, at one offered load:" \
             "$(awk -v a="$pr" -v b="$pp" -v qa="$qr" -v qb="$qp" \
                'BEGIN { printf "%+.2f ms (plain %.2f ms at %.0f/s," \
                         " record %.2f ms at %.0f/s)", a - b, b, qb, a, qa }')"
        echo "    the gateway's own \$request_time, p99 / p99.9 (ms):" \
             "plain $(awk '$1 == "plain" { print $5 }' "$run/wrk/paced.txt" \
                      | median) / $(awk '$1 == "plain" { print $6 }' \
                      "$run/wrk/paced.txt" | median)," \
             "record $(awk '$1 == "record" { print $5 }' "$run/wrk/paced.txt" \
                      | median) / $(awk '$1 == "record" { print $6 }' \
                      "$run/wrk/paced.txt" | median)"
    fi
    if grep -q '^dedupe ' "$run/wrk/paced.txt" 2>/dev/null; then
        pp=$(awk '$1 == "dedupe" { print $4 }' "$run/wrk/paced.txt" | median)
        pr=$(awk '$1 == "durable" { print $4 }' "$run/wrk/paced.txt" \
             | median)
        echo "  durable p99 - dedupe p99, at one offered load (one" \
             "replica on loopback): $(awk -v a="$pr" -v b="$pp" \
                'BEGIN { printf "%+.2f ms (dedupe %.2f ms, durable" \
                         " %.2f ms)", a - b, b, a }')"
    fi
    if [ -n "${p99[record]:-}" ] && [ -n "${p99[plain]:-}" ]; then
        echo "  record p99 - plain p99 at saturation: $(awk \
             -v a="${p99[record]}" -v b="${p99[plain]}" \
             'BEGIN { printf "%+.2f ms", a - b }')"
    fi
    echo "  redis us per call: record <= 4.5, dedupe <= 10 (set for four"
    echo "  plain commands; rd us counts a script's own commands twice:"
    echo "  make redis-cost counts them once)"
    echo
    echo "redis per call, by command (all rounds: commands, usec):"
    for v in "${variants[@]}"; do
        newid "$v" && [ "$v" != hdrsid ] || continue
        reqs=$(awk -v v="$v" '$1 == v { n += $7 } END { print n + 0 }' \
               "$run/wrk/all.txt")
        [ "$reqs" -gt 0 ] || continue
        cat "$run/wrk/$v"-*.redis 2>/dev/null | awk -F'[:=,]' -v n="$reqs" '
            { k = substr($1, 9) }
            k !~ /^(info|config)/ {
                for (i = 2; i < NF; i += 2) {
                    if ($i == "calls") c[k] += $(i + 1)
                    if ($i == "usec") u[k] += $(i + 1)
                }
            }
            END {
                for (k in c) printf "  %s %.2f x %.2f us", k, c[k] / n,
                                    u[k] / n
                printf "\n"
            }' | sed "s/^/  $v:/"
    done
    [ "${alerts:-0}" = 0 ] \
        || echo "error logs: $alerts error/alert line(s) under build/bench/run"
    echo "noise: a ratio means something only when its distance from 1 is" \
         "well above the spread column ((max-min)/median of the rounds)." \
         "Per-round numbers: build/bench/run/wrk/all.txt"
} | tee "$result"
