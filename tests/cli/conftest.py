"""The in-process `cdlaw` fixture the command tests share."""

import pytest
from runhelpers import cdlaw_here


@pytest.fixture
def cdlaw(monkeypatch, capsys, tmp_path):
    """`cdlaw ARGS` in this process: (exit code, stdout, stderr)."""
    return lambda *args: cdlaw_here(monkeypatch, capsys, tmp_path, *args)
