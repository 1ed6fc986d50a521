#!/usr/bin/env bash
# paper-1.2b training throughput on one GPU: the configurations of docs/performance.md, each in
# its own process (an out-of-memory configuration gives an OOM row, not a crash), then one table.
#   bash benchmarks/gpu_throughput.sh [OUT_DIR]     # rows in OUT_DIR/throughput.jsonl
# Each configuration is capped at PER_CONFIG_S seconds (default 170) so one slow compile cannot
# take the whole session; extra arguments for every configuration go in EXTRA.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-.}"; mkdir -p "$out"; rows="$out/throughput.jsonl"; : > "$rows"
cap="${PER_CONFIG_S:-170}"
bench() {
  echo "== $*" >&2
  timeout "$cap" python3 benchmarks/train_throughput.py --preset paper-1.2b --compile --json \
    --steps "${STEPS:-5}" --warmup-steps 2 ${EXTRA:-} "$@" >> "$rows" \
    || echo "   (exit $? : no row)" >&2
}
# H100 80GB, 2026-11-25 (docs/performance.md): the two without checkpointing fit (58 / 50 GB,
# 40.5% MFU); the checkpointed ones did not finish within a 150 s cap; the plain one runs out.
bench --micro-batch 2 --grad-accum 16 --loss-chunk-tokens 4096
bench --micro-batch 1 --grad-accum 32
bench --micro-batch 4 --grad-accum 8 --loss-chunk-tokens 4096 --activation-checkpointing 1
bench --micro-batch 4 --grad-accum 8 --loss-chunk-tokens 4096 --activation-checkpointing 3
bench --micro-batch 4   # the plain configuration (full fp32 logits, no checkpointing)
python3 benchmarks/train_throughput.py --render "$rows"
python3 benchmarks/train_throughput.py --render "$rows" --markdown
