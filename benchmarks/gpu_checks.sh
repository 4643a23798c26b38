#!/usr/bin/env bash
# Every check a GPU machine is for, in one short run (issues 19 and 36): when time on a GPU is scarce, run this once.
#
#     bash benchmarks/gpu_checks.sh TREEBANK.conllu OUT_DIR [MODEL_DIR]
#
# Sized for a 15-minute lease (about 9 minutes of it; sessions 21 and 27 ran it on an H200):
# 1. tests/test_cuda.py (skipped without a GPU elsewhere), verbose, into OUT_DIR/test_cuda.log (~100 s);
# 2. host_overhead.py on MODEL_DIR (default: the bundled MiniLM) in float32 and bfloat16: every corpus job
#    against a bare forward on the GPU, and the host's share of four of them (~100 s each);
# 3. host_overhead.py on a seeded random BERT of bert-base's shape, bfloat16 then float32, while time is left
#    (no host share and no `erase`, whose probes at every layer above its own would not fit: `--no-split`);
# 4. cold_start.py in bfloat16 (a job's first run in a fresh process), while time is left; `--with-cudnn`
#    is session 21's question, answered (benchmarks/README.md), and left out;
# 5. device_profile.py on gradient importance in bfloat16, while time is left;
# 6. device_syncs.py: where each job's batch still makes the host wait for the GPU, into steps.log (~20 s);
# 7. sae.py throughput: SAE training against a bare forward on the GPU, float32 then bfloat16, while time is left.
# Each step has its own time limit and leaves its JSON in OUT_DIR (8 files at most); every summary line
# goes to OUT_DIR/steps.log and to the terminal. Exit status 0.
set -u
data=${1:?a CoNLL-U treebank}
out=${2:?a folder for the logs and results}
model=${3:-$(python3 -c "from bertscope.model.model_files import bundled_model_dir as d; print(d())")}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
log=$out/steps.log
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
say() { echo "== $1 [$(elapsed)s]"; tail -n 1 "$log"; }

timeout 170 python3 -m pytest tests/test_cuda.py -v -rfE -p no:cacheprovider > "$out/test_cuda.log" 2>&1
echo "== tests/test_cuda.py: $(tail -n 1 "$out/test_cuda.log") [$(elapsed)s]"
grep -E "^(FAILED|ERROR)" "$out/test_cuda.log" | head -n 20

overhead() {  # name, time limit, arguments...
    local name=$1 limit=$2; shift 2
    echo "-- $name" >> "$log"
    timeout "$limit" python3 benchmarks/host_overhead.py --conllu "$data" --device cuda --runs 3 --no-count \
        -o "$out/$name.json" "$@" > /dev/null 2>> "$log"
    say "$name"
}
overhead minilm_float32 140 --model "$model" --dtype float32
overhead minilm_bfloat16 140 --model "$model" --dtype bfloat16
base_jobs=patterns,norms,syntax,geometry,compare,features,importance,cloze,mixing
[ "$(elapsed)" -lt 420 ] && overhead base_bfloat16 120 --shape base --dtype bfloat16 --runs 2 --no-split --jobs $base_jobs
[ "$(elapsed)" -lt 460 ] && overhead base_float32 100 --shape base --dtype float32 --runs 2 --no-split --jobs $base_jobs
if [ "$(elapsed)" -lt 500 ]; then
    echo "-- cold_start" >> "$log"
    timeout 50 python3 benchmarks/cold_start.py --conllu "$data" --model "$model" --device cuda --dtype bfloat16 \
        -o "$out/cold.json" > /dev/null 2>> "$log"
    say "cold_start"
fi
if [ "$(elapsed)" -lt 530 ]; then
    echo "-- device_profile" >> "$log"
    timeout 50 python3 benchmarks/device_profile.py --conllu "$data" --model "$model" --job importance --device cuda \
        --dtype bfloat16 -o "$out/profile_importance_bfloat16.json" > /dev/null 2>> "$log"
    echo "== device_profile [$(elapsed)s]"; grep -A 20 " under the profiler" "$log" | tail -n 21
fi
if [ "$(elapsed)" -lt 540 ]; then
    echo "-- device_syncs" >> "$log"
    timeout 45 python3 benchmarks/device_syncs.py --conllu "$data" --model "$model" > /dev/null 2>> "$log"
    echo "== device_syncs [$(elapsed)s]"; grep -A 7 "^synchronising calls" "$log" | tail -n 7
fi
for dtype in float32 bfloat16; do
    if [ "$(elapsed)" -lt 570 ]; then
        echo "-- sae_$dtype" >> "$log"
        timeout 60 python3 benchmarks/sae.py throughput --data "$data" --model "$model" --device cuda --dtype "$dtype" \
            -o "$out/sae_$dtype.json" > /dev/null 2>> "$log"
        say "sae_$dtype"
    fi
done
echo "== done in $(elapsed)s"
exit 0
