#!/usr/bin/env bash
# `make demo`: the embedded default end to end — sweep → fit → downstream → plan → report.
# Every stage reads only the files the previous one wrote (runs/demo/*.parquet, fit.json,
# downstream.json).
set -euo pipefail
cd "$(dirname "$0")/.."
CDLAW=${CDLAW:-.venv/bin/cdlaw}
OUT=${OUT:-runs}
start=$(date +%s)

# DEMO_SKIP_SWEEP=1 runs stages 2-5 on runs already in $OUT/demo (tests/test_demo_script.py).
if [ "${DEMO_SKIP_SWEEP:-0}" != 1 ]; then
  echo "== 1/5  sweep: train the demo grid on the embedded corpus, small runs packed together (resumes if interrupted)"
  $CDLAW sweep sweeps/demo.toml --out "$OUT" --pack auto
fi

echo "== 2/5  fit: the CD law on runs/demo (seeds averaged), with bootstrap CIs; then the largest size held out"
$CDLAW fit "$OUT/demo" --select mean --bootstrap 100
log="$OUT/demo/fit_holdout.log"
# results go to stdout and notes to stderr: keep both, show the held-out line
if ! $CDLAW fit "$OUT/demo" --select mean --holdout-largest --out "$OUT/demo/fit_holdout.json" > "$log" 2>&1; then
  cat "$log"; exit 1
fi
grep "held out" "$log"

echo "== 3/5  downstream: per task, the link from loss to its metric; do both strategies share it?"
echo "         and each task's noise and predictors of a bigger model, checked on larger runs held out"
# Exit code 2 is bad input: here, runs without task columns (a runs folder from before
# [eval]); the plan is then made without task links.
link=()
set +e
$CDLAW downstream "$OUT/demo"
code=$?
set -e
if [ "$code" = 0 ]; then
  link=(--link "$OUT/demo/downstream.json")
elif [ "$code" = 2 ]; then
  echo "(no task links: the runs in $OUT/demo hold no task columns)"
else
  exit "$code"
fi

# The plan sweeps/demo.toml's [plan] asks for, which the report (stage 5) plans too.
echo "== 4/5  plan: the sweep file's [plan], a budget inside the demo's range (its largest run is 1.8e12 FLOPs), with its own fit and task links"
$CDLAW plan --law "$OUT/demo/fit.json" --budget-flops 2e12 --unique-tokens 96K ${link[@]+"${link[@]}"}

echo "== 5/5  report: the same plan, with the figures and tables behind it"
$CDLAW report "$OUT/demo"
echo "demo finished in $(( $(date +%s) - start )) s; open $OUT/demo/report.html"
