"""Where a command writes what a user named (--out, --figure): cdlaw makes the last missing
folder of the path, inside one that exists, never the folders above it. A mistyped
/nonexistent/dir/r.html is one sentence and exit 2, and nothing is made."""

from pathlib import Path

import pytest

from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo-runs.csv"
PLAN = ("--budget-flops", "2e12", "--unique-tokens", "96K")

# Every command that writes where --out (or govern's --figure) says, with the rest of what
# it needs to get as far as checking that place: (its arguments, the place, as a file in
# FOLDER or the folder itself).
COMMANDS = {
    "fit": (["fit", DEMO], "--out", "f.json"),
    "compare": (["compare", DEMO], "--out", "c.json"),
    "report": (["report", DEMO], "--out", "r.html"),
    "plot": (["plot", DEMO], "--out", ""),
    "downstream": (["downstream", DEMO], "--out", "d.json"),
    "next": (["next", DEMO, *PLAN], "--out", "n.toml"),
    "govern": (["govern", DEMO, *PLAN], "--figure", "g.png"),
    "sweep": (["sweep", ROOT / "sweeps" / "smoke.toml", "--dry-run"], "--out", ""),
    "prepare": (["prepare", ROOT / "sweeps" / "smoke.toml"], "--out", ""),
    "adapt": (["adapt", ROOT / "sweeps" / "demo-seed.toml", "--grid", ROOT / "sweeps" / "demo.toml",
               *PLAN, "--executor", "simulate", "--law", "qin2026"], "--out", ""),
    "paraphrase": (["paraphrase", DEMO, "--endpoint", "http://127.0.0.1:9/v1", "--model", "m"],
                   "--out", ""),
    "distill": (["distill", ROOT / "sweeps" / "strategies.toml", "--teacher", "t"], "--out", ""),
}  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_makes_folders_above_the_one_it_writes_in(cdlaw, tmp_path, command):
    args, option, name = COMMANDS[command]
    folder = tmp_path / "nonexistent" / "dir"
    target = folder / name if name else folder
    code, out, err = cdlaw(*args, option, target)
    said = " ".join(err.split())
    assert code == 2 and out == "", err
    assert said == (
        f"error: {option} {target}: the folder {tmp_path / 'nonexistent'} does not exist; make "
        f"it first (mkdir -p {folder}) or give a path in a folder that exists"
    )
    assert not (tmp_path / "nonexistent").exists()


def test_the_last_folder_of_a_path_is_made_and_no_other(tmp_path):
    (tmp_path / "file").write_text("")
    assert check_out_path(tmp_path / "new" / "r.html", "--out") == tmp_path / "new" / "r.html"
    assert check_out_path(tmp_path / "new", "--out", folder=True) == tmp_path / "new"
    refused = {
        (tmp_path / "a" / "b" / "r.html", False): f"the folder {tmp_path / 'a'} does not exist",
        (tmp_path / "a" / "b", True): f"the folder {tmp_path / 'a'} does not exist",
        (tmp_path / "file" / "r.html", False): f"{tmp_path / 'file'} is a file, not a folder",
        (tmp_path / "file" / "x" / "r.html", False): f"{tmp_path / 'file'} is a file",
        (tmp_path / "file", True): "is a file; give a folder",
        (tmp_path, False): f"is a folder; give a file name, such as {tmp_path / 'r.html'}",
    }
    for (path, folder), why in refused.items():
        with pytest.raises(BadInput, match=why.replace("(", r"\(")):
            check_out_path(path, "--out", folder=folder, example="r.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
