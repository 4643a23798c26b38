#!/usr/bin/env bash
# Every check a GPU machine is for, in one short run (issue 19): when time on a GPU is scarce, run this once.
#
#     bash benchmarks/gpu_checks.sh TREEBANK.conllu OUT_DIR [SENTENCES]
#
# 1. tests/test_cuda.py (skipped without a GPU elsewhere), verbose, into OUT_DIR/test_cuda.log;
# 2. device_jobs.py in float32 and bfloat16 (every corpus job against a bare forward on the GPU);
# 3. device_profile.py on the two open questions of session 12's figures: gradient importance in
#    bfloat16 (7x float32's time there) and patterns in float32 (6.7x a bare forward);
# 4. the whole suite on this machine, one line per test (-v) into OUT_DIR/suite.log, so that a run
#    cut short still names every failure so far.
# Each step has its own time limit; the last lines printed are a summary. Exit status 0.
set -u
data=${1:?a CoNLL-U treebank}
out=${2:?a folder for the logs and results}
sentences=${3:-4078}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

timeout 300 python3 -m pytest tests/test_cuda.py -v -rfE -p no:cacheprovider > "$out/test_cuda.log" 2>&1
for dtype in float32 bfloat16; do
    timeout 240 python3 benchmarks/device_jobs.py --conllu "$data" --sentences "$sentences" --small 500 --device cuda \
        --dtype "$dtype" --random-mlm -o "$out/device_jobs_$dtype.json" > /dev/null 2> "$out/device_jobs_$dtype.err"
done
timeout 120 python3 benchmarks/device_profile.py --conllu "$data" --job importance --device cuda --dtype bfloat16 \
    -o "$out/profile_importance_bfloat16.json" > /dev/null 2> "$out/profile_importance_bfloat16.err"
timeout 120 python3 benchmarks/device_profile.py --conllu "$data" --job patterns --device cuda --dtype float32 \
    -o "$out/profile_patterns_float32.json" > /dev/null 2> "$out/profile_patterns_float32.err"
workers=$(( $(nproc) > 12 ? 12 : $(nproc) ))
timeout 420 python3 -m pytest -v -rfE -n "$workers" -p no:cacheprovider > "$out/suite.log" 2>&1

echo "== tests/test_cuda.py: $(tail -n 1 "$out/test_cuda.log")"
for name in device_jobs_float32 device_jobs_bfloat16; do
    echo "== $name: $(tail -n 1 "$out/$name.err")"
done
for name in profile_importance_bfloat16 profile_patterns_float32; do
    echo "== $name"; grep -A 20 " under the profiler" "$out/$name.err"
done
echo "== the suite: $(tail -n 1 "$out/suite.log")"
grep -E "^(\[gw[0-9]+\] )?\[ *[0-9]+%\] (FAILED|ERROR)|^(FAILED|ERROR) " "$out/suite.log" | head -n 30
exit 0
