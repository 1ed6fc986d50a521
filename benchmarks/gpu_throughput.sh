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
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader >&2 || true
# Most informative first, so a capped call still returns the rows that matter. H100 80GB,
# 2026-11-25 (docs/performance.md): 1x32 plain and 2x16 with the (then recomputing) chunked loss
# gave 40.5% MFU; the plain 4x8 ran out of memory; checkpointed ones did not finish in 150 s.
# 2026-11-26, with expandable segments (now the default) and the fused loss: 4x8 chunk 44.1%.
bench --micro-batch 4 --grad-accum 8 --loss-chunk-tokens 4096   # fused linear cross-entropy
bench --micro-batch 1 --grad-accum 32                           # the 2026-11-25 baseline
bench --micro-batch 4 --grad-accum 8                            # plain: full fp32 logits
bench --micro-batch 2 --grad-accum 16 --loss-chunk-tokens 4096  # fits an 80 GB H100
python3 benchmarks/train_throughput.py --render "$rows"
python3 benchmarks/train_throughput.py --render "$rows" --markdown
