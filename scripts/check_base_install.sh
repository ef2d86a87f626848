#!/usr/bin/env bash
# The base install (`pip install .`, no [train] extra) fits and plans the demo's runs
# without torch, and `cdlaw sweep` names the extra it needs (exit 2). CI runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m venv "$tmp/venv"
bin="$tmp/venv/bin"
"$bin/python" -m pip install -q --upgrade pip
"$bin/python" -m pip install -q .
for m in torch transformers datasets tokenizers; do
  if "$bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$m') is None)"; then
    echo "base install: $m is installed but should come only with the [train] extra"; exit 1
  fi
done
"$bin/cdlaw" fit examples/demo-runs.csv --select mean --starts 1024 --out "$tmp/fit.json" 2> "$tmp/fit.log" \
  || { cat "$tmp/fit.log"; exit 1; }
"$bin/cdlaw" plan --law "$tmp/fit.json" --budget-flops 2e12 --unique-tokens 96K --json > "$tmp/plan.json"
"$bin/python" -c "import json, sys; p = json.load(open(sys.argv[1])); assert p['n_params'] > 0, p" "$tmp/plan.json"
"$bin/cdlaw" plot "$tmp/fit.json" --kind rstar --out "$tmp/figures" > /dev/null 2>&1
set +e
"$bin/cdlaw" sweep sweeps/smoke.toml --out "$tmp/runs" 2> "$tmp/sweep.err"
rc=$?
set -e
# The advice: the train extra, installed from the clone with the Makefile's CPU torch pinned.
torch_spec=$(sed -n 's/^TORCH_SPEC *?= *//p' Makefile)
advice="pip install -e '.[train]' $torch_spec --extra-index-url https://download.pytorch.org/whl/cpu"
if [ "$rc" -ne 2 ] || ! grep -qF "the train extra" "$tmp/sweep.err" || ! grep -qF "$advice" "$tmp/sweep.err"; then
  echo "base install: cdlaw sweep should exit 2 naming the train extra and \`$advice\`; it exited $rc:"
  cat "$tmp/sweep.err"; exit 1
fi
echo "base install: fit, plan and plot without torch; sweep names the [train] extra"
