#!/usr/bin/env bash
# `make demo`: the embedded default end to end — sweep → fit → plan → report.
# Every stage reads only the files the previous one wrote (runs/demo/*.parquet, fit.json).
set -euo pipefail
cd "$(dirname "$0")/.."
CDLAW=${CDLAW:-.venv/bin/cdlaw}
OUT=${OUT:-runs}
start=$(date +%s)

echo "== 1/4  sweep: train the demo grid on the embedded corpus (resumes if interrupted)"
$CDLAW sweep sweeps/demo.toml --out "$OUT"

echo "== 2/4  fit: the CD law on runs/demo, with bootstrap CIs and the largest size held out"
$CDLAW fit "$OUT/demo" --bootstrap 100
$CDLAW fit "$OUT/demo" --holdout-largest --out "$OUT/demo/fit_holdout.json" > /dev/null

echo "== 3/4  plan: an illustrative budget with the demo's own fit"
$CDLAW plan --law "$OUT/demo/fit.json" --budget-flops 1e15 --unique-tokens 2e6

echo "== 4/4  report"
$CDLAW report "$OUT/demo"
echo "demo finished in $(( $(date +%s) - start )) s; open $OUT/demo/report.html"
