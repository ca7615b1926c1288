#!/usr/bin/env bash
# GPU compute calibrations on a lent GPU machine (the `device` tool runs this in a copy of
# the working tree; results go under $OUT).  One `testbed calibrate --device cuda` per
# shipped model, at a per-GPU batch of our choosing (the CASSINI paper gives job batches,
# not per-GPU ones), CUDA-event timings, medians of 20 after 5 warm-up iterations.
# Usage there:  OUT=/some/dir bash scripts/device/calibrate_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the calibration files}"
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0)); print("transformers", transformers.__version__)'
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
status=0
for spec in "resnet50 64" "vgg16 64" "vgg11 64" "wide_resnet101 32" "bert_base 32" "gpt2 16"; do
  set -- $spec
  echo "calibrate: $1 batch $2"
  if ! timeout 150 "$PY" -c 'import sys; from testbed.cli import main; sys.exit(main(sys.argv[1:]))' \
      calibrate --model "$1" --batch "$2" --device cuda --repeats 20 --warmup 5 \
      --out "$OUT/$1.json" > "$OUT/$1.log" 2>&1; then
    echo "calibrate: $1 FAILED"; tail -5 "$OUT/$1.log"; status=1
  fi
done
exit $status
