"""`cdlaw report`: the page's content, and a real headless Chromium that opens it.

The browser is driven through the DevTools protocol over a pipe (--remote-debugging-pipe),
with the standard library only: it loads the file, decodes every image, and we collect
console errors, exceptions and failed loads.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time

import plotdata
import pytest

from cdlaw.errors import BadInput
from cdlaw.figures.plot import KINDS
from cdlaw.report.gather import BUDGET_MULTIPLE, gather
from cdlaw.report.page import render, write_report

CHROMIUM = next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
    None,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return plotdata.write_runs(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def report(runs):
    return gather(runs)


@pytest.fixture(scope="module")
def page(report, runs):
    """The page as write_report writes it (the CLI test runs write_report itself)."""
    path = runs / "report.html"
    text = render(report)
    path.write_text(text)
    return path, text


# ---------------------------------------------------------------------------------------
# A minimal DevTools-protocol client over --remote-debugging-pipe (fd 3 in, fd 4 out).
# ---------------------------------------------------------------------------------------


class Browser:
    def __init__(self, user_data_dir):
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        flags = (
            "--headless --no-sandbox --disable-gpu --disable-background-networking "
            "--disable-component-update --disable-sync --no-first-run "
            "--disable-default-apps --remote-debugging-pipe"
        )
        # bash puts the pipe ends on the fds the protocol expects, then execs chromium.
        cmd = f'exec "{CHROMIUM}" {flags} --user-data-dir="{user_data_dir}" 3<&{to_r} 4>&{from_w}'
        self.proc = subprocess.Popen(
            ["bash", "-c", cmd],
            pass_fds=(to_r, from_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_r], [], [], left)
            if ready:
                chunk = os.read(self._from_r, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params=None, session=None, timeout: float = 30.0) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        os.close(self._from_r)


def open_in_chromium(path, user_data_dir) -> dict:
    """Load a file; return every image's decoded size and every console error / exception."""
    b = Browser(user_data_dir)
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.call(f"{domain}.enable", session=session)
        b.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        b.wait_for("Page.loadEventFired", timeout=60)
        images = b.call(
            "Runtime.evaluate",
            {
                "expression": "Promise.all(Array.from(document.images).map(i => i.decode()"
                ".then(() => [i.naturalWidth, i.naturalHeight], () => [0, 0])))",
                "awaitPromise": True,
                "returnByValue": True,
            },
            session=session,
        )["result"]["value"]
        title = b.call(
            "Runtime.evaluate",
            {"expression": "document.title", "returnByValue": True},
            session=session,
        )["result"]["value"]
        errors = []
        for e in b.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(("console", p["args"][0].get("value") if p.get("args") else ""))
            elif m == "Runtime.exceptionThrown":
                errors.append(("exception", p["exceptionDetails"].get("text")))
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(("log", p["entry"].get("text")))
            elif m == "Network.loadingFailed":
                errors.append(("network", p.get("errorText")))
        requests = [
            e["params"]["request"]["url"]
            for e in b.events
            if e.get("method") == "Network.requestWillBeSent"
        ]
        return {"images": images, "errors": errors, "title": title, "requests": requests}
    finally:
        b.close()


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (CI installs it: apt-get install chromium)"
)


@needs_chromium
def test_chromium_loads_the_report_and_decodes_every_image(page, tmp_path):
    path, _ = page
    got = open_in_chromium(path, tmp_path / "profile")
    assert got["title"] == "cdlaw report: synthetic"
    assert len(got["images"]) == len(KINDS) == 7  # every figure kind
    for w, h in got["images"]:
        assert w > 400 and h > 300
    assert got["errors"] == []
    # nothing but the file itself was requested: the page is self-contained
    assert [u for u in got["requests"] if not u.startswith(("file:", "data:"))] == []


@needs_chromium
def test_the_browser_check_catches_broken_pages(tmp_path):
    # The check above must be able to fail: a corrupt image and a console error are seen.
    broken = tmp_path / "broken.html"
    bad_png = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really a png").decode()
    broken.write_text(
        f'<!DOCTYPE html><title>x</title><img src="data:image/png;base64,{bad_png}">'
        '<script>console.error("boom")</script>'
    )
    got = open_in_chromium(broken, tmp_path / "profile")
    assert got["images"] == [[0, 0]]
    assert ("console", "boom") in got["errors"]


# ---------------------------------------------------------------------------------------
# What the page says
# ---------------------------------------------------------------------------------------


def test_report_has_settings_runs_fit_regimes_plan_and_figures(page, runs):
    path, text = page
    assert path == runs / "report.html"
    # sweep settings, verbatim
    assert html.escape(plotdata.SWEEP_TOML) in text
    # every run in the run table
    import pandas as pd

    summary = pd.read_parquet(runs / "summary.parquet")
    for run_id in summary["run_id"]:
        assert text.count(f">{run_id}<") == 2  # run table + regime table
    # the fit with its 95% intervals: alpha = 0.289137, CI ±5%
    fit = json.loads((runs / "fit.json").read_text())
    alpha = fit["params"]["alpha"]
    assert re.search(
        rf"<td class=\"l\">alpha</td><td[^>]*>{alpha:.4g}</td><td[^>]*>{alpha * 0.95:.4g}</td>",
        text,
    )
    assert f"{fit['strategies']['paraphrase']['rho']:.4g}" in text
    # regimes with thresholds and floors: the thresholds of docs/regimes.md
    assert "saturation threshold <b>0.9</b>" in text and "<b>0.01</b> nats" in text
    assert text.count('<tr class="compute-bound">') + text.count(
        '<tr class="data-bound">'
    ) + text.count('<tr class="model-bound">') == len(summary)
    # figures: seven PNGs, embedded (the comparison of laws last)
    imgs = re.findall(
        r'<img alt="(\w+) figure" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text
    )
    assert [k for k, _ in imgs] == ["loss", "eta", "rstar", "frontier", "residuals", "curves",
                                    "compare"]  # fmt: skip
    for _, data in imgs:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in text and "https://" not in text and "<script" not in text


def test_held_out_check_and_seed_noise_are_shown(tmp_path):
    runs = plotdata.write_runs(tmp_path / "r")
    fit = json.loads((runs / "fit.json").read_text())
    fit["seed_noise"] = {"sd_log": 0.0234, "n_groups": 5, "n_runs": 10}
    (runs / "fit.json").write_text(json.dumps({**fit, "holdout": None}))
    text = render(gather(runs))
    assert re.search(r"held out</td><td[^>]*>none<", text)
    assert "0.0234 between replicate seeds (10 runs in 5 cells)" in text
    # make demo's separate held-out fit, beside fit.json
    holdout = {"n_params": 2e5, "n_rows": 20, "rmse_log": 0.0829}
    (runs / "fit_holdout.json").write_text(json.dumps({**fit, "holdout": holdout}))
    assert re.search(r"held out</td><td[^>]*>N ≥ 200K, rmse_log 0.0829<", render(gather(runs)))


def test_default_plan_is_100x_the_largest_run(report, runs):
    from cdlaw.plan.planner import plan
    from cdlaw.plan.source import load_law

    largest = max(
        6 * n * f * (1 + r)
        for n in plotdata.SIZES
        for f in (n * t for t in plotdata.TOKENS_PER_PARAM)
        for r in plotdata.RATIOS
    )
    assert BUDGET_MULTIPLE == 100
    assert report.budget_flops == pytest.approx(100 * largest)
    assert report.unique_tokens == max(plotdata.SIZES) * max(plotdata.TOKENS_PER_PARAM)
    want = plan(load_law(str(runs / "fit.json")), 100 * largest, report.unique_tokens)
    assert report.plan["n_params"] == pytest.approx(want.n_params)
    assert report.plan["predicted_loss"] == pytest.approx(want.predicted_loss)
    text = render(report)
    assert f"Budget C = {100 * largest:.3g} FLOPs" in text
    assert f"{report.plan['predicted_loss']:.4g}" in text
    for name in ("CD law", "naive Chinchilla", "four-epoch rule"):
        assert f'<td class="l">{name}</td>' in text


def few_runs(tmp_path, n: int = 2):
    """A runs folder of n runs and no fit: too few to identify the law."""
    return plotdata.write_runs(tmp_path, with_fit=False, n_runs=n)


def test_report_without_a_fit_says_how_to_make_one(tmp_path):
    # The fit refuses two runs; the report says so and how to fit, and still shows the runs
    # and their curves.
    runs = few_runs(tmp_path)
    report = gather(runs)
    assert report.inputs.fit is None
    assert f"`cdlaw fit {runs}`" in report.fit_note and "cannot be fitted yet" in report.fit_note
    assert list(report.figures) == ["curves"]
    assert "it needs a fit" in report.skipped["loss"]
    text = render(report)
    assert "No plan without a fit." in text and html.escape(report.fit_note) in text


def test_cli_report_and_bad_input(tmp_path):
    def run(*args):
        cmd = [sys.executable, "-m", "cdlaw", "report", *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        return done.returncode, done.stdout, " ".join(done.stderr.split())  # unwrap rich

    runs = few_runs(tmp_path)
    out = tmp_path / "r.html"
    code, stdout, stderr = run(
        str(runs), "--out", str(out), "--budget-flops", "2e20", "--unique-tokens", "1B"
    )
    assert code == 0, stderr
    assert stdout.strip().splitlines()[-1] == str(out)
    assert "no fit.json" in stderr
    assert "Budget C = 2e+20 FLOPs and U = 1B unique tokens" in out.read_text()
    code, _, stderr = run(str(runs), "--out", str(tmp_path / "x.html"), "--budget-flops", "lots")
    assert code == 2 and "--budget-flops" in stderr and "Traceback" not in stderr
    code, _, stderr = run(str(tmp_path / "nope"), "--out", str(tmp_path / "x.html"))
    assert code == 2 and "is not a folder" in stderr
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(BadInput, match="--unique-tokens must be a positive"):
        gather(runs, unique_tokens=-1.0)
    with pytest.raises(BadInput, match="is a folder; give a file name"):
        write_report(runs, tmp_path)
