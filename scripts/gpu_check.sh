#!/usr/bin/env bash
# The GPU checks of packed training, as one short command for a machine with a CUDA GPU:
# the packed table of benchmarks/bench_train.py (14M/30M/60M at seq 2048, bf16, MFU) eager
# and compiled, and the packed-training tests on that machine. Uses the python3 there
# (its torch and transformers), cdlaw from this checkout, and writes every log to $OUT.
#
#   OUT=gpu-check bash scripts/gpu_check.sh          # on the GPU machine: a few minutes
#   OUT=/tmp/gc TINY=1 bash scripts/gpu_check.sh     # the same steps on CPU in seconds
#
# TINY=1 runs the benchmark's --tiny form (the GPU table's code on CPU at a toy shape),
# so the script itself can be checked where there is no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu-check}
STEPS=${STEPS:-20}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
tiny=()
[ "${TINY:-0}" = 1 ] && tiny=(--tiny) && STEPS=2
status=0

"$PYTHON" - <<'EOF' 2>&1 | tee "$OUT/machine.txt"
import platform, torch, transformers
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
print(f"python {platform.python_version()}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}, {gpu}")
EOF

for mode in eager compile; do
  flags=(--pack --gpu --steps "$STEPS" "${tiny[@]}")
  [ "$mode" = compile ] && flags+=(--compile)
  echo "== bench_train.py ${flags[*]}"
  "$PYTHON" benchmarks/bench_train.py "${flags[@]}" > "$OUT/pack-$mode.txt" 2>&1 || status=1
  grep -v -i "warn" "$OUT/pack-$mode.txt" | tail -n 6
done

# Packed runs against runs alone, on this machine's device (CUDA kernels need not be
# bit for bit: a failure here is a finding to read, not necessarily a bug).
echo "== tests/train/test_pack_train.py"
"$PYTHON" -m pytest -q -p no:cacheprovider tests/train/test_pack_train.py > "$OUT/tests.txt" 2>&1 || status=1
tail -n 3 "$OUT/tests.txt"
echo "gpu check: logs in $OUT (status $status)"
exit "$status"
