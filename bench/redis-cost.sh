#!/bin/bash
# What a call costs Redis, on an idle Redis: the number `make bench`
# cannot give on two CPUs, where Redis shares its CPU with wrk and
# INFO commandstats (wall time) counts the preemptions too.
#
#   bench/redis-cost.sh        (make redis-cost: builds the module first)
#
# It starts a redis-server and a gateway (one worker, the module, a
# keepalive upstream to a return 200 in the same nginx) under
# build/redis-cost/ and sends one call to each variant with MONITOR on:
#
#   record       idem_record on
#   record-long  the same with idem_record_arrival_delay 0: what a call
#                longer than the delay costs
#   dedupe       idem_dedupe on, scope off
#
# It keeps the commands that name that call's id: what the gateway really
# sends for a call id used once.  Then, for each variant and run, it
# empties Redis, resets its statistics, replays those commands for
# COST_CALLS new call ids in one redis-cli --pipe and reports the usec
# INFO commandstats counted, per call (a script's own commands counted
# once more under their names where the call also sends them itself), and
# the redis-server process's CPU per call.  Then it sends real calls through
# the gateway for COST_GATEWAY_SECONDS=3, one at a time (wrk -c1) and at
# one offered load (32 connections, 4 ms apart), and reports the same sum
# per call (COST_COMMANDS=1: and each command's line), with the CPU time
# the redis-server process used per call.  A report, not a test: exit 0
# whatever it measures.
#
# Environment:
#   COST_CALLS=20000    calls per run
#   COST_VARIANTS="record record-long dedupe"
#   COST_MODULE=build/ngx_http_idem_module.so (another build's, e.g. an
#                       older commit's, for a comparison in one run)
#   COST_RUNS=5         runs per variant (the report gives each, and the
#                       median)
#   COST_GATEWAY_SECONDS=3  each run through the gateway
#   NGINX_BIN=/usr/sbin/nginx
#   COST_PORT=<n>       the ports to take: n (Redis), n + 1 (the gateway),
#                       n + 2 (its backend); unset: free ones the kernel
#                       picks (from its ephemeral range)

set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
run=$root/build/redis-cost
module=${COST_MODULE:-$root/build/ngx_http_idem_module.so}
# nginx.conf names it from the run's directory
[ -f "$module" ] && module=$(realpath "$module")
variants=${COST_VARIANTS:-record record-long dedupe}
nginx=${NGINX_BIN:-/usr/sbin/nginx}
calls=${COST_CALLS:-20000}
runs=${COST_RUNS:-5}

die() { echo "redis-cost: $*" >&2; exit 1; }

[ -f "$module" ] || die "no $module (make first)"
command -v redis-server >/dev/null || die "no redis-server (make deps)"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0));
print(s.getsockname()[1])'
}

if [ -n "${COST_PORT:-}" ]; then
    redis_port=$COST_PORT
    gateway_port=$((COST_PORT + 1))
    backend_port=$((COST_PORT + 2))
else
    redis_port=$(free_port)
    gateway_port=$(free_port)
    backend_port=$(free_port)
fi

rm -rf "$run" && mkdir -p "$run/logs"

redis-server --bind 127.0.0.1 --port "$redis_port" --save '' \
    --appendonly no --dir "$run" --maxmemory-policy noeviction \
    --logfile "$run/redis.log" --daemonize no &
redis_pid=$!

# a module from before idem_record_arrival_delay: COST_VARIANTS without it
record_long=
if [[ " $variants " == *" record-long "* ]]; then
    # what a call that outlives idem_record_arrival_delay costs
    record_long='
        location /record-long {
            idem on;
            idem_deadline 3s;
            idem_record on;
            idem_record_arrival_delay 0;
            proxy_pass http://backend;
        }
'
fi

cat >"$run/nginx.conf" <<EOF
load_module $module;
worker_processes 1;
daemon off;
master_process on;
error_log $run/logs/error.log notice;
pid $run/logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $run/body;
    proxy_temp_path $run/proxy;
    fastcgi_temp_path $run/fastcgi;
    uwsgi_temp_path $run/uwsgi;
    scgi_temp_path $run/scgi;

    idem_redis 127.0.0.1:$redis_port;

    upstream backend {
        server 127.0.0.1:$backend_port;
        keepalive 8;
    }

    server {
        listen 127.0.0.1:$backend_port;
        return 200 "ok\n";
    }

    server {
        listen 127.0.0.1:$gateway_port;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /record {
            idem on;
            idem_deadline 3s;
            idem_record on;
            proxy_pass http://backend;
        }

$record_long        location /dedupe {
            idem on;
            idem_deadline 3s;
            idem_call_id_missing reject;
            idem_dedupe on;
            idem_dedupe_scope off;
            proxy_pass http://backend;
        }
    }
}
EOF

"$nginx" -p "$run/" -c "$run/nginx.conf" -e "$run/logs/error.log" &
nginx_pid=$!

cleanup() {
    kill "$nginx_pid" "$redis_pid" 2>/dev/null || true
    wait "$nginx_pid" "$redis_pid" 2>/dev/null || true
}
trap cleanup EXIT

rcli() { redis-cli -p "$redis_port" "$@"; }

# the usec INFO commandstats counted, summed over the commands a call
# sends ($1: their names, lower case, space-separated): a script's EVALSHA
# counts the commands it runs, which commandstats counts again under
# their own names, and the gateway's other commands are not the call's
redis_usec() {
    rcli info commandstats | tr -d '\r' | awk -F'[:,=]' -v names="$1" '
        BEGIN { n = split(names, a, " "); for (i = 1; i <= n; i++) k[a[i]] = 1 }
        /^cmdstat_/ { c = substr($1, 9); if (c in k) s += $5 }
        END { print s + 0 }'
}

# the redis-server process's CPU time so far, in clock ticks: what it
# spends per call on reading, parsing and answering too, which
# commandstats leaves out (the 0.5 s idle after each run adds its
# background tasks' few ticks)
redis_cpu() { awk '{ print $14 + $15 }' "/proc/$redis_pid/stat"; }

for _ in $(seq 100); do
    rcli ping >/dev/null 2>&1 \
        && curl -s -o /dev/null "http://127.0.0.1:$gateway_port/" && break
    sleep 0.1
done

echo "redis-cost: $(redis-server --version | cut -d' ' -f1-3)," \
     "$calls calls per run, $runs runs per variant"

for variant in $variants; do
    probe="costprobe-$variant"

    redis-cli -p "$redis_port" monitor >"$run/$variant.monitor" &
    monitor_pid=$!
    sleep 0.3
    curl -s -o /dev/null -H "X-Call-Id: $probe" \
        "http://127.0.0.1:$gateway_port/$variant"
    # the writes nobody waits for leave within a few ms
    sleep 0.5
    kill "$monitor_pid" 2>/dev/null || true
    wait "$monitor_pid" 2>/dev/null || true

    # MONITOR's lines, the probe's commands, N calls of them in RESP
    python3 - "$run/$variant.monitor" "$probe" "$calls" \
        "$run/$variant.resp" <<'PY'
import re, sys

monitor, probe, calls, out = sys.argv[1], sys.argv[2].encode(), \
    int(sys.argv[3]), sys.argv[4]

def unquote(s):
    # MONITOR prints each argument as a C-like quoted string
    out, i = bytearray(), 0
    while i < len(s):
        c = s[i]
        if c == '\\':
            n = s[i + 1]
            if n == 'x':
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
                continue
            out += {'n': b'\n', 'r': b'\r', 't': b'\t', 'a': b'\a',
                    'b': b'\b'}.get(n, n.encode())
            i += 2
            continue
        out += c.encode()
        i += 1
    return bytes(out)

cmds = []
for line in open(monitor, encoding='latin-1'):
    # a script's own commands ("[0 lua]"): its EVALSHA runs them again
    if re.match(r'^\S+ \[\d+ lua\]', line):
        continue
    args = [unquote(a) for a in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]
    if any(probe in a for a in args):
        cmds.append(args)

if not cmds:
    sys.exit("redis-cost: no command named " + probe.decode())

with open(out, 'wb') as f:
    for i in range(calls):
        id = b'cost-%08d' % i
        for args in cmds:
            args = [a.replace(probe, id) for a in args]
            f.write(b'*%d\r\n' % len(args))
            for a in args:
                f.write(b'$%d\r\n%s\r\n' % (len(a), a))

with open(out + '.names', 'w') as f:
    f.write(' '.join(sorted(set(a[0].decode().lower() for a in cmds))))

print("  %s: %d commands per call: %s" % (
    probe.decode().split('-', 1)[1], len(cmds),
    ', '.join(a[0].decode().upper() for a in cmds)))
PY

    results=""
    cpus=""
    for _ in $(seq "$runs"); do
        rcli flushall >/dev/null
        rcli config resetstat >/dev/null
        cpu0=$(redis_cpu)
        rcli --pipe <"$run/$variant.resp" >/dev/null
        cpu=$(( $(redis_cpu) - cpu0 ))
        usec=$(redis_usec "$(cat "$run/$variant.resp.names")")
        results="$results $(awk -v u="$usec" -v n="$calls" \
                                'BEGIN { printf "%.2f", u / n }')"
        cpus="$cpus $(awk -v t="$cpu" -v n="$calls" \
                         -v hz="$(getconf CLK_TCK)" \
                         'BEGIN { printf "%.1f", t * 1e6 / hz / n }')"
    done
    median=$(echo $results | tr ' ' '\n' | sort -n \
             | awk '{ v[NR] = $1 } END { printf "%.2f",
                     NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    echo "  $variant: Redis usec per call:$results (median $median)"
    # what commandstats leaves out (reading, parsing, answering) and a
    # script's own commands counted once: the process's CPU
    echo "  $variant: redis-server CPU usec per call replayed:$cpus"

    # the same through the gateway: one call at a time (wrk -c1; each
    # command reaches Redis alone), and at one offered load well under
    # saturation (32 connections, 4 ms between a connection's calls; the
    # writes of many calls reach Redis together), as a cross-check
    if command -v wrk >/dev/null; then
        for load in one paced; do
            rcli flushall >/dev/null
            rcli config resetstat >/dev/null
            if [ $load = one ]; then
                args=(-c1 -s "$root/bench/bench-newid.lua"
                      "http://127.0.0.1:$gateway_port/$variant"
                      -- "gw-$variant")
                what="one call at a time"
            else
                args=(-c32 -s "$root/bench/bench-paced.lua"
                      "http://127.0.0.1:$gateway_port/$variant"
                      -- 4 "gwp-$variant")
                what="32 connections, 4 ms apart"
            fi
            cpu0=$(redis_cpu)
            done_calls=$(wrk -t1 -d"${COST_GATEWAY_SECONDS:-3}"s "${args[@]}" \
                         | awk '/requests in/ { print $1 }')
            # the writes nobody waits for leave within a few ms
            sleep 0.5
            cpu=$(( $(redis_cpu) - cpu0 ))
            if [ -n "${COST_COMMANDS:-}" ]; then
                rcli info commandstats | tr -d '\r' | grep '^cmdstat_' \
                    | grep -v '^cmdstat_\(flushall\|config\|info\)[:|]' \
                    | sed 's/^/    /'
            fi
            usec=$(redis_usec "$(cat "$run/$variant.resp.names")")
            echo "  $variant: through the gateway, $what:" \
                 "$(awk -v u="$usec" -v n="$done_calls" \
                        'BEGIN { printf "%.2f", u / n }') usec per call," \
                 "redis-server CPU $(awk -v t="$cpu" -v n="$done_calls" \
                     -v hz="$(getconf CLK_TCK)" \
                     'BEGIN { printf "%.1f", t * 1e6 / hz / n }') usec" \
                 "($done_calls calls)"
        done
    else
        echo "  $variant: no wrk, no calls through the gateway" \
             "(make bench installs it)"
    fi
done
