#!/bin/bash
# Runs the libFuzzer targets named as arguments (make fuzz builds them),
# each for FUZZ_SECONDS (or FUZZ_RUNS executions) over its seed corpus,
# fuzz/corpus/<target>.  New inputs go to FUZZ_BUILD/corpus/<target>, not
# into the repository; a crash, leak or sanitizer report is kept in
# FUZZ_BUILD/findings/ and fails the run.  Extra libFuzzer options can go
# in FUZZ_OPTIONS (e.g. -jobs=2).
set -e
cd "$(dirname "$0")/.."

bin=${FUZZ_BUILD:-build/fuzz}
seconds=${FUZZ_SECONDS:-6}

if [ -n "$FUZZ_RUNS" ]; then
    limit="-runs=$FUZZ_RUNS"
else
    limit="-max_total_time=$seconds"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$bin/findings"

status=0
passed=0
failed=0

for t in "$@"; do
    mkdir -p "$bin/corpus/$t"
    log=$bin/$t.log

    if "$bin/$t" $limit -timeout=10 -print_final_stats=1 \
           -artifact_prefix="$bin/findings/$t-" $FUZZ_OPTIONS \
           "$bin/corpus/$t" "fuzz/corpus/$t" > "$log" 2>&1
    then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
        printf "%-13s ok: %s runs in %s s, %s\n" "$t" "$runs" "$secs" "$cov"
        passed=$((passed + 1))
    else
        echo "$t: FAILED (log: $log, input: $bin/findings/$t-*)"
        grep -A40 -m1 -E 'ERROR: |runtime error|ngx_idem fuzz:' "$log" \
            | head -60
        status=1
        failed=$((failed + 1))
    fi
done

echo "fuzz: $passed passed, $failed failed"

exit $status
