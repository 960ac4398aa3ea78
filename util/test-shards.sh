#!/bin/bash
# Runs test files side by side: TEST_JOBS shards, each a util/test.sh of
# its own (its own nginx ports, redis-server, backend and server root),
# taking files from one queue, the slowest known first (t/durations), so
# that the shards end together whatever each file takes on this machine.
# util/test.sh calls it for the whole suite, or for a list of files, when
# TEST_JOBS is over 1 and no port is given.
#
# Shard k (0, 1, ...) takes the ports TEST_PORT_BASE + 1000 k and up: nginx
# on the base (the files derive up to base + 202 from it), the backend on
# base + 210 (+ 211 for its DNS), redis-server on base + 250 (the files
# derive up to base + 975 from it: faults, clusters, sentinels), the
# bundled harness's $TEST_NGINX_RAND_PORT_<n> from base + 976 to + 999,
# all below 32768, where the kernel takes no ports for outgoing
# connections.  Two runs
# side by side (CI's) take bases at least 1000 x TEST_JOBS apart.
#
# Each file's output is kept in t/servroot-shards-BASE/; the output of a
# file that fails is printed at the end.  Prints each file as it ends, the
# slowest files, and "N passed, N failed" (tests) last; exits 1 when a file
# failed.
set -e
cd "$(dirname "$0")/.."
root=$PWD

jobs=${TEST_JOBS:-3}
base=${TEST_PORT_BASE:-20000}
out=$root/t/servroot-shards-$base

if [ $((base + 1000 * jobs)) -gt 32768 ] || [ "$base" -lt 1024 ]; then
    echo "TEST_PORT_BASE=$base, TEST_JOBS=$jobs: the shards' ports must lie" \
         "within 1024-32767 (the kernel gives ports above to outgoing" \
         "connections)"
    exit 2
fi
rm -rf "$out" && mkdir -p "$out/logs"

# the files asked for, or all of t/
files=()
for a in "$@"; do
    if [ -d "$a" ]; then
        files+=($(find "$a" -maxdepth 1 -name '*.t' | sort))
    else
        files+=("$a")
    fi
done
[ ${#files[@]} -gt 0 ] || files=($(ls t/*.t))

# the queue: files in t/durations, slowest first, then the others (new
# files: not measured yet, so started early, as if slow)
queue=$out/queue
{
    for f in "${files[@]}"; do
        grep -q "^${f#./} " t/durations 2>/dev/null || echo "0 $f"
    done
    awk 'NR == FNR { want[$1] = 1; next }
         ($1 in want) { print $2, $1 }' \
        <(printf '%s\n' "${files[@]#./}") t/durations 2>/dev/null \
        | sort -rn -k1,1
} | awk '{ print $2 }' > "$queue"

echo "$(wc -l < "$queue") files, $jobs shards (ports from $base)"

start=$(date +%s)
pids=()
for ((k = 0; k < jobs; k++)); do
    p=$((base + 1000 * k))
    IDEM_TEST_QUEUE=$queue IDEM_TEST_OUT=$out \
    TEST_NGINX_PORT=$p TEST_NGINX_SERVER_PORT=$p \
    TEST_NGINX_BACKEND_PORT=$((p + 210)) TEST_NGINX_REDIS_PORT=$((p + 250)) \
    TEST_NGINX_REDIS_FAULT_PORT=$((p + 450)) \
    TEST_NGINX_SERVROOT=$root/t/servroot-shard-$p \
        util/test.sh > "$out/shard-$k.log" 2>&1 &
    pids+=($!)
done

# each file's line as it ends (the shards append to results)
touch "$out/results"
shown=0
show() {
    local n
    n=$(wc -l < "$out/results")
    [ "$n" -gt "$shown" ] || return 0
    sed -n "$((shown + 1)),${n}p" "$out/results" \
        | while read -r f res tests bad secs; do
              printf '%-4s %-36s %5d tests %4d s\n' \
                  "$res" "$f" "$tests" "$secs"
          done
    shown=$n
}
while [ -n "$(jobs -rp)" ]; do
    show
    sleep 2
done
show

status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done

secs=$(($(date +%s) - start))

# a shard that could not set up (a port taken) ran no file
for ((k = 0; k < jobs; k++)); do
    if grep -q '^setup failed' "$out/shard-$k.log"; then
        echo "shard $k:"
        cat "$out/shard-$k.log"
    fi
done

ran=$(wc -l < "$out/results")
left=$(wc -l < "$queue")
failed_files=$(awk '$2 != "ok"' "$out/results" | wc -l)
tests=$(awk '{ t += $3 } END { print t + 0 }' "$out/results")
bad=$(awk '{ b += $4 } END { print b + 0 }' "$out/results")

for f in $(awk '$2 != "ok" { print $1 }' "$out/results"); do
    echo
    echo "=== $f failed:"
    cat "$out/logs/$(basename "$f").log"
done

echo
echo "slowest files (s):"
sort -rn -k5,5 "$out/results" | head -10 | awk '{ printf "  %4d  %s\n", $5, $1 }'
echo "Files=$ran, Tests=$tests, $secs wallclock secs ($jobs shards)"
if [ "$left" -gt 0 ]; then
    echo "$left files not run"
    status=1
fi
if [ "$failed_files" -gt 0 ] || [ "$status" -ne 0 ]; then
    echo "Result: FAIL"
    status=1
else
    echo "Result: PASS"
fi
echo "$((tests - bad)) passed, $bad failed"
exit $status
