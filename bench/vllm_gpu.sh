#!/usr/bin/env bash
# prmkit score --backend vllm against the HF backend on one CUDA GPU (needs vLLM >= 0.11.1 and
# prmkit installed: pip install 'prmkit[vllm]'). Not run in CI; see docs/scaling-out.md.
#
# Model: the default PRM exported as a standard HF folder (prmkit export, float32: a
# LlamaForTokenClassification, prmkit step format). Input: grouped lab candidates (prmkit lab
# problems + prmkit generate --policy lab:0.1:0.6, 8 per problem). Both backends score in
# float32; the script prints each run's wall time and records/s, then the largest difference
# between the two backends' scores, last. With Ray installed it also runs vLLM on one Ray
# worker holding the GPU (--ray local --workers 1 --worker-gpus 1). Last, when the ProcessBench
# dev slice is there (DATA, default ../shared/data/processbench_dev), a generative PRM on vLLM's
# engine: SmolLM2-135M-Instruct, plain template, 4 verifications per solution
# (docs/generative-prms.md); it prints its F1, parse rate, tokens and seconds per solution.
#
# usage: bench/vllm_gpu.sh [PROBLEMS (default 64)]   (PRMKIT=... to choose the prmkit command)
set -euo pipefail
n=${1:-64}
PRMKIT=${PRMKIT:-prmkit}
PY=${PY:-python3}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
$PY -c "import vllm; print('vllm', vllm.__version__)"
$PRMKIT export --model default --output "$t/prm" --dtype float32
$PRMKIT lab problems --n "$n" --seed 0 --output "$t/problems.jsonl"
$PRMKIT generate --policy lab:0.1:0.6 --input "$t/problems.jsonl" -n 8 --output "$t/cands.jsonl"
run() {  # name, extra options
  local name=$1; shift
  local start=$(date +%s.%N)
  $PRMKIT score --model "$t/prm" --dtype float32 --input "$t/cands.jsonl" --output "$t/$name.jsonl" "$@"
  local end=$(date +%s.%N)
  $PY -c "import sys; n=sum(1 for _ in open('$t/$name.jsonl')); s=$end-$start; print(f'$name: {n} records in {s:.1f} s ({n/s:.1f} records/s, model load included)')"
}
run hf --device cuda
run vllm --backend vllm
names="hf vllm"
if $PY -c "import ray" 2>/dev/null; then
  run vllm-ray --backend vllm --ray local --workers 1 --worker-gpus 1
  names="$names vllm-ray"
fi
$PY - "$t" $names <<'PY'
import json, sys
folder, names = sys.argv[1], sys.argv[2:]
rows = {n: [json.loads(l) for l in open(f"{folder}/{n}.jsonl")] for n in names}
base = rows["hf"]
for n in names[1:]:
    assert [r["id"] for r in rows[n]] == [r["id"] for r in base], f"{n}: other ids or order"
    d = max(abs(a - b) for x, y in zip(rows[n], base)
            for a, b in zip(x["step_scores"], y["step_scores"]) if a is not None and b is not None)
    nulls = sum((a is None) != (b is None) for x, y in zip(rows[n], base)
                for a, b in zip(x["step_scores"], y["step_scores"]))
    print(f"{n} against hf: max |score difference| {d:.2e} over {len(base)} records, "
          f"{nulls} steps scored by one side only")
PY
DATA=${DATA:-../shared/data/processbench_dev}
if [ -f "$DATA/gsm8k.json" ]; then
  $PRMKIT eval processbench --data "$DATA/gsm8k.json" --model smollm2-135m --backend generative \
    --engine vllm --format plain --samples 4 --max-new-tokens 512 --output "$t/generative.json"
fi
