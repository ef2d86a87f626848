"""A real headless Chromium for the report tests, driven through the DevTools protocol.

The browser runs with --remote-debugging-pipe and is spoken to with the standard library
only: it loads a file at a given window size, decodes every image, runs the test's own
JavaScript expressions in the page, and collects console errors, exceptions and failed
loads.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time

CHROMIUM = next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
    None,
)


class Browser:
    """A minimal DevTools-protocol client over --remote-debugging-pipe (fd 3 in, fd 4 out)."""

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


def _evaluate(b: Browser, session: str, expression: str):
    got = b.call(
        "Runtime.evaluate",
        {"expression": expression, "awaitPromise": True, "returnByValue": True},
        session=session,
    )
    if "exceptionDetails" in got:
        raise RuntimeError(f"{expression[:80]}: {got['exceptionDetails']}")
    return got["result"].get("value")


def open_in_chromium(path, user_data_dir, viewport=(1280, 800), expressions=None) -> dict:
    """Load a file in a viewport of (width, height) CSS pixels; return every image's decoded
    size, every console error / exception, the requests made, and the value of each
    JavaScript expression in `expressions` (name -> source), evaluated in order."""
    b = Browser(user_data_dir)
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.call(f"{domain}.enable", session=session)
        width, height = viewport
        b.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        b.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        b.wait_for("Page.loadEventFired", timeout=60)
        images = _evaluate(
            b,
            session,
            "Promise.all(Array.from(document.images).map(i => i.decode()"
            ".then(() => [i.naturalWidth, i.naturalHeight], () => [0, 0])))",
        )
        title = _evaluate(b, session, "document.title")
        values = {k: _evaluate(b, session, js) for k, js in (expressions or {}).items()}
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
        return {
            "images": images,
            "errors": errors,
            "title": title,
            "requests": requests,
            "values": values,
        }
    finally:
        b.close()
