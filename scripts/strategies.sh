#!/usr/bin/env bash
# sweeps/strategies.toml end to end: three kinds of derived token on the embedded corpus —
# repetition, paraphrase and self-distillation — trained, fitted and compared.
# Every stage resumes where it stopped; run it again after an interruption.
set -euo pipefail
cd "$(dirname "$0")/.."
CDLAW=${CDLAW:-.venv/bin/cdlaw}
PYTHON=${PYTHON:-.venv/bin/python}
SWEEP=sweeps/strategies.toml
OUT=runs                  # the sweep's [derived.distill] folders are under runs/ too
PASSES=${PASSES:-24}      # continuations per document: enough for r = 15 (they run shorter)
start=$(date +%s)

echo "== 1/5  the one-epoch and repetition runs (the teachers among them)"
$CDLAW sweep $SWEEP --out $OUT --pack auto --only "strategy=none|repetition"

echo "== 2/5  self-distillation: the 200K repetition run at r = 7 of each D continues every document inside that D"
for D in 48000 96000; do
  teacher=$($PYTHON - "$OUT/strategies/summary.parquet" "$D" <<'PY'
import sys

import pandas as pd

runs = pd.read_parquet(sys.argv[1])
pick = runs[(runs["strategy"] == "repetition") & (runs["size"] == "200K")
            & (runs["fresh_tokens"] == int(sys.argv[2])) & (runs["derived_ratio"] == 7)
            & (runs["status"] == "done")]
if len(pick) != 1:
    sys.exit(f"no finished teacher run at D = {sys.argv[2]} in {sys.argv[1]}")
print(pick["run_id"].iloc[0])
PY
)
  $CDLAW distill $SWEEP --out $OUT --fresh-tokens $D --passes "$PASSES" --batch-size 512 \
    --teacher "$OUT/strategies/$teacher/model"
done

echo "== 3/5  the paraphrase and distill runs"
$CDLAW sweep $SWEEP --out $OUT --pack auto

echo "== 4/5  fit: every strategy's own K, rho, sigma, with bootstrap intervals"
$CDLAW fit $OUT/strategies --bootstrap 200

echo "== 5/5  plan and report"
$CDLAW plan --law $OUT/strategies/fit.json --budget-flops 2e12 --unique-tokens 96K
$CDLAW report $OUT/strategies
echo "strategies finished in $(( $(date +%s) - start )) s; open $OUT/strategies/report.html"
