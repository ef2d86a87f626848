"""Every number is the number for the inputs given (issue 44): a sweep with a declared
strategy and a task file, whose files are edited between sweeps into the same folder —
after the runs finished, or after a kill in the middle of one. Derived files (what runs
train on): refused in one sentence naming the file and the runs, never kept and never
resumed; `--restart` then gives a fresh folder's numbers. Task files (what runs are
scored on): the saved models re-scored, the old scores dropped, the same numbers as a
fresh folder's. Folders written before inputs were recorded keep working."""

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from runhelpers import cdlaw_here

from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.system.errors import BadInput

SWEEP = """
name = "ident"
[grid]
size = ["20K"]
fresh_tokens = [2048]
strategy = ["distill"]
derived_ratio = [0, 1]
[derived.distill]
files = "der"
[data]
vocab_size = 512
val_tokens = 2048
[model]
seq_len = 32
[train]
batch_size = 8
eval_every = 4
log_every = 1
checkpoint_every = 2
{eval}
"""
EVAL = '[eval]\ntasks = ["tasks/quiz.jsonl"]'
QUIZ = ["task_quiz_bpb", "task_quiz_acc", "task_quiz_acc_norm"]
WORDS = ["river", "city", "company", "element", "species", "person"]


def derived_rows(version: str) -> str:
    """Four passes of the first 200 documents (the embedded corpus's ids are their places):
    other text in each version, the same ids and passes."""
    rows = []
    for i in range(200):
        for k in (1, 2, 3, 4):
            if version == "A":
                text = f"Rewrite {k} of document {i}: the {WORDS[i % 6]} is old and large."
            else:
                text = f"Note {k}, number {i}: a {WORDS[(i + k) % 6]} was founded in {1800 + i}."
            rows.append(json.dumps({"id": str(i), "pass": k, "text": text}))
    return "\n".join(rows) + "\n"


def quiz(version: str) -> str:
    """Multiple-choice items; version B moves every gold answer."""
    items = []
    for i, word in enumerate(WORDS):
        choices = [f" {w}" for w in WORDS[:3]]
        gold = i % 3 if version == "A" else (i + 1) % 3
        items.append(json.dumps({"context": f"The {word} is a", "choices": choices, "gold": gold}))
    return "\n".join(items) + "\n"


def workdir(root: Path, der: str, tasks: str, with_eval: bool = True) -> Path:
    """A folder holding the sweep file, der/rows.jsonl and tasks/quiz.jsonl."""
    root.mkdir(parents=True)
    (root / "der").mkdir()
    (root / "der" / "rows.jsonl").write_text(derived_rows(der))
    (root / "tasks").mkdir()
    (root / "tasks" / "quiz.jsonl").write_text(quiz(tasks))
    (root / "s.toml").write_text(SWEEP.format(eval=EVAL if with_eval else ""))
    return root


def sweep(root: Path, one_thread, **options):
    """run_sweep in this process (one job), on the files in `root`."""
    options = SweepOptions(exec_cfg=one_thread, jobs=1, **options)
    return run_sweep(root / "s.toml", root / "runs", options)


def numbers(root: Path) -> pd.DataFrame:
    """The summary's losses and task scores, by strategy (the run ids are the same)."""
    df = pd.read_parquet(root / "runs" / "ident" / "summary.parquet")
    cols = ["strategy", "loss", "train_loss"] + [c for c in QUIZ if c in df]
    return df[cols].sort_values("strategy").reset_index(drop=True)


def swept(root: Path, one_thread) -> Path:
    """root (a workdir) swept once, in root: a module fixture's folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        sweep(root, one_thread)
    return root


def killed_midway(root: Path, monkeypatch, one_thread) -> Path:
    """root (a workdir), chdir'd into, with its sweep killed in the distill run at step 6."""
    monkeypatch.chdir(root)
    with monkeypatch.context() as m:
        interrupt_distill_at(m, 6)
        with pytest.raises(KeyboardInterrupt):
            sweep(root, one_thread)
    return root


@pytest.fixture(scope="module")
def fresh_b(tmp_path_factory, one_thread):
    """A fresh folder trained on the edited files (derived B, tasks B): the numbers to get."""
    return numbers(swept(workdir(tmp_path_factory.mktemp("fresh") / "w", "B", "B"), one_thread))


def interrupt_distill_at(monkeypatch, step: int) -> None:
    """The distill run stops after `step` with its checkpoint saved, as a kill leaves it
    (the run alone: the run without derived tokens finishes)."""
    from cdlaw.train import loop

    train_run = loop.train_run

    def stopped(cfg, *args, **kwargs):
        if cfg.strategy != "distill":
            return train_run(cfg, *args, **kwargs)
        try:
            train_run(cfg, *args, **kwargs, stop_after_steps=step)
        except loop.RunInterrupted:
            raise KeyboardInterrupt from None  # the sweep dies here, as under a kill

    monkeypatch.setattr(loop, "train_run", stopped)


def refused(root: Path, monkeypatch, capsys) -> str:
    """The rerun's exit code is 2 with one sentence (returned), and nothing is trained."""
    stamps = {p: p.stat().st_mtime_ns for p in (root / "runs").rglob("*") if p.is_file()}
    code, _, err = cdlaw_here(monkeypatch, capsys, root, "sweep", "s.toml", "--out", "runs")
    message = " ".join(err.split())
    assert code == 2 and err.strip().count("\n") == 0, err
    now = {p: p.stat().st_mtime_ns for p in (root / "runs").rglob("*") if p.is_file()}
    changed = {p for p in now if stamps.get(p) != now[p]}
    assert not changed, changed  # no new token cache, no run touched, no hash remembered
    return message


def test_finished_runs_edited_task_file_rescored_edited_derived_files_refused(
    tmp_path, monkeypatch, capsys, one_thread, fresh_b
):
    root = workdir(tmp_path / "w", "A", "A")
    monkeypatch.chdir(root)
    sweep(root, one_thread)
    folder = root / "runs" / "ident"
    # the task file edited: both runs re-scored from model/, none trained, old scores gone
    (root / "tasks" / "quiz.jsonl").write_text(quiz("B"))
    # until the next sweep the scores are of the old file: status marks them, and what
    # links or reads the links says so
    code, out, _ = cdlaw_here(monkeypatch, capsys, root, "status", "runs/ident", "--json")
    assert code == 0 and [r.get("rescore") for r in json.loads(out)] == [["quiz"]] * 2
    assert not any(r.get("changed") for r in json.loads(out))  # nothing to retrain
    code, _, err = cdlaw_here(monkeypatch, capsys, root, "status", "runs/ident")
    assert "2 run(s) were scored on task files edited since" in " ".join(err.split())
    from cdlaw.sweep.summary import folder_warnings

    assert folder_warnings(Path("runs/ident")) == []  # a fit of the losses: nothing to say
    (said,) = folder_warnings(Path("runs/ident"), "this link file", tasks=True)
    assert said.startswith("2 of the runs were scored on task files edited since"), said
    assert "quiz): this link file is of the old tasks there" in said
    _, _, err = cdlaw_here(monkeypatch, capsys, root, "downstream", "runs/ident")
    assert "this link file is of the old tasks there" in " ".join(err.split())  # said first
    (root / "runs" / "ident" / "downstream.json").unlink(missing_ok=True)  # of the old tasks
    again = sweep(root, one_thread)
    assert again.trained == [] and again.exit_code == 0
    got = numbers(root)
    none = got["strategy"] == "none"
    pd.testing.assert_frame_equal(got[none], fresh_b[fresh_b["strategy"] == "none"])
    for run in folder.glob("*/metrics.parquet"):  # the curve's scores were of the old file
        assert not set(QUIZ) & set(pd.read_parquet(run).columns)
    stamps = {p: p.stat().st_mtime_ns for p in folder.glob("*/*.json")}
    assert sweep(root, one_thread).trained == []  # recorded: nothing to do a second time
    code, out, _ = cdlaw_here(monkeypatch, capsys, root, "status", "runs/ident", "--json")
    assert not any(r.get("rescore") for r in json.loads(out))  # scored again: current
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*/*.json")} == stamps
    # the derived files edited (other text, same ids and passes): refused, then retrained
    (root / "der" / "rows.jsonl").write_text(derived_rows("B"))
    message = refused(root, monkeypatch, capsys)
    assert "1 run(s) in runs/ident trained on other inputs" in message, message
    assert "[derived.distill] files 'der' (rows.jsonl changed) for 1 of them" in message
    assert "--restart" in message and "--out" in message
    with pytest.raises(BadInput, match=r"rows\.jsonl changed"):
        sweep(root, one_thread)
    # meanwhile `cdlaw status` says which finished run is of the old files
    code, out, _ = cdlaw_here(monkeypatch, capsys, root, "status", "runs/ident", "--json")
    marked = {r["strategy"]: r.get("changed") for r in json.loads(out)}
    assert code == 0 and marked["none"] is None
    assert marked["distill"] == ["[derived.distill] files 'der' (rows.jsonl changed)"]
    code, out, err = cdlaw_here(monkeypatch, capsys, root, "status", "runs/ident")
    assert code == 0 and "1 run(s) were trained on other inputs" in " ".join(err.split())
    assert "[derived.distill]" in out  # the table's note names the setting, not markup
    assert_fit_names_the_old_inputs(root, folder, monkeypatch, capsys)
    sweep(root, one_thread, restart=True)
    pd.testing.assert_frame_equal(numbers(root), fresh_b)
    code, out, _ = cdlaw_here(monkeypatch, capsys, root, "status", "runs/ident", "--json")
    assert not any(r.get("changed") for r in json.loads(out))


def assert_fit_names_the_old_inputs(root: Path, folder: Path, monkeypatch, capsys) -> None:
    """`cdlaw fit` of the folder warns that its fit is of the old inputs. Two tiny runs pin
    no law, so the summary is, for this, a fittable table holding the stale run's id."""
    from lawtables import make_table

    summary = folder / "summary.parquet"
    kept = summary.read_bytes()
    stale = pd.read_parquet(summary).query("strategy == 'distill'")["run_id"].iloc[0]
    table = make_table(n_derived=40).assign(status="done", run_id=lambda t: t.index.astype(str))
    table.loc[table["derived_tokens"] > 0, "run_id"] = [stale] + [
        f"other{i}" for i in range(int((table["derived_tokens"] > 0).sum()) - 1)
    ]
    table.to_parquet(summary)
    try:
        code, _, err = cdlaw_here(
            monkeypatch, capsys, root, "fit", "runs/ident", "--starts", "8", "--out", "f.json"
        )
        compared = cdlaw_here(monkeypatch, capsys, root, "compare", "runs/ident", "--law",
                              "chinchilla,cd", "--starts", "8", "--out", "c.json")  # fmt: skip
        # a fit beside the runs, of them as they are listed: what reads it warns all the same
        assert cdlaw_here(monkeypatch, capsys, root, "fit", "runs/ident", "--starts", "8")[0] == 0
        planned = cdlaw_here(monkeypatch, capsys, root, "plan", "--law", "runs/ident/fit.json",
                             "--budget-flops", "1e15", "--unique-tokens", "1e6", "--extrapolate",
                             "--json")  # fmt: skip
        reported = cdlaw_here(monkeypatch, capsys, root, "report", "runs/ident", "--budget-flops",
                              "1e15", "--unique-tokens", "1e6", "--extrapolate")  # fmt: skip
    finally:
        summary.write_bytes(kept)
    assert compared[0] == 0 and "this comparison is of the old" in " ".join(compared[2].split())
    assert planned[0] == 0, planned[2]
    (first, *_) = json.loads(planned[1])["warnings"]
    assert "this fit (runs/ident/fit.json) is of the old inputs" in first, first
    page = (root / "runs" / "ident" / "report.html").read_text()
    assert reported[0] == 0 and "this report is of the old inputs" in " ".join(reported[2].split())
    assert "warning: 1 of the runs fitted were trained on other inputs" in page
    warnings = json.loads((root / "f.json").read_text())["warnings"]
    # the table's other ids name no run folder: as if deleted since the summary was written
    (gone,) = [w for w in warnings if "have no run folder any more" in w]
    assert gone.startswith(f"{len(table) - 1} run(s) in runs/ident's summary.parquet"), gone
    said = [w for w in warnings if stale in w]
    assert code == 0 and len(said) == 1, said
    assert "this fit is of the old inputs" in " ".join(err.split())  # and the CLI says it
    assert said[0].startswith("1 of the runs fitted were trained on other inputs"), said
    assert "rows.jsonl changed" in said[0] and "this fit is of the old inputs" in said[0]


def test_a_task_file_of_the_same_name_at_a_new_path_is_scored_again(
    tmp_path, monkeypatch, one_thread, fresh_b
):
    """[eval] pointed at another file of the same name (tasks_v2/quiz.jsonl, version B): its
    columns are the old file's, so the runs are scored again, as for an edit in place."""
    root = workdir(tmp_path / "w", "A", "A")
    monkeypatch.chdir(root)
    sweep(root, one_thread)
    (root / "tasks_v2").mkdir()
    (root / "tasks_v2" / "quiz.jsonl").write_text(quiz("B"))
    toml = root / "s.toml"
    toml.write_text(toml.read_text().replace("tasks/quiz.jsonl", "tasks_v2/quiz.jsonl"))
    assert sweep(root, one_thread).trained == []
    got, want = numbers(root), fresh_b
    none = got["strategy"] == "none"
    pd.testing.assert_frame_equal(got[none], want[want["strategy"] == "none"])
    (root / "tasks" / "quiz.jsonl").write_text(quiz("B"))  # B at the old path too
    toml.write_text(toml.read_text().replace("tasks_v2/quiz.jsonl", "tasks/quiz.jsonl"))
    stamps = {p: p.stat().st_mtime_ns for p in (root / "runs").glob("*/*/result.json")}
    sweep(root, one_thread)  # old path: nothing to score again
    assert {p: p.stat().st_mtime_ns for p in (root / "runs").glob("*/*/result.json")} == stamps


def test_a_killed_run_is_never_resumed_onto_edited_derived_files(
    tmp_path, monkeypatch, capsys, one_thread
):
    root = killed_midway(workdir(tmp_path / "w", "A", "B"), monkeypatch, one_thread)
    rows = root / "der" / "rows.jsonl"
    rows.write_text(derived_rows("B"))  # swapped while it was down
    message = refused(root, monkeypatch, capsys)
    assert "1 run(s) in runs/ident trained on other inputs" in message, message
    assert "(rows.jsonl changed) for 1 of them" in message and "--restart" in message
    # the same content back, under a new inode and mtime, is the same input; and a partial
    # run of an older cdlaw (config.json without inputs) resumes and takes them on
    rows.unlink()
    rows.write_text(derived_rows("A"))
    (partial,) = [p for p in (root / "runs" / "ident").glob("*/checkpoint")]
    config = json.loads((partial.parent / "config.json").read_text())
    assert config["inputs"]["files"]
    (partial.parent / "config.json").write_text(json.dumps({**config, "inputs": None}))
    outcome = sweep(root, one_thread)
    assert outcome.exit_code == 0 and outcome.trained == [partial.parent.name]
    assert json.loads((partial.parent / "config.json").read_text())["inputs"] == config["inputs"]


def test_a_killed_run_resumes_onto_an_edited_task_file_without_its_old_scores(
    tmp_path, monkeypatch, one_thread, fresh_b
):
    root = killed_midway(workdir(tmp_path / "w", "B", "A"), monkeypatch, one_thread)
    (root / "tasks" / "quiz.jsonl").write_text(quiz("B"))
    outcome = sweep(root, one_thread)
    assert outcome.exit_code == 0 and len(outcome.trained) == 1  # resumed, not restarted
    pd.testing.assert_frame_equal(numbers(root), fresh_b)
    (run,) = [p for p in (root / "runs" / "ident").glob("*") if p.name in outcome.trained]
    curve = pd.read_parquet(run / "metrics.parquet")
    scored = curve.dropna(subset=[QUIZ[0]])["step"].tolist()
    assert scored and min(scored) > 6  # the scores of the old file, before the kill, dropped
    config = json.loads((run / "config.json").read_text())
    task = next(f for f in config["inputs"]["files"] if f["setting"] == "eval.tasks")
    assert task["sha256"] == hashlib.sha256(quiz("B").encode()).hexdigest()


@pytest.fixture(scope="module")
def plain_a(tmp_path_factory, one_thread):
    """A folder trained on derived files A without [eval]: tests copy it."""
    root = workdir(tmp_path_factory.mktemp("plain") / "w", "A", "A", with_eval=False)
    return swept(root, one_thread)


def copy_of(plain_a: Path, tmp_path: Path, monkeypatch) -> tuple[Path, dict[str, Path]]:
    """A copy of plain_a to work in, and its run folders by strategy."""
    root = tmp_path / "w"
    shutil.copytree(plain_a, root)
    monkeypatch.chdir(root)
    folder = root / "runs" / "ident"
    runs = {json.loads(p.read_text())["strategy"]: p.parent for p in folder.glob("*/result.json")}
    return root, runs


def test_finished_runs_without_recorded_inputs_are_kept_and_checked_from_then_on(
    plain_a, tmp_path, monkeypatch, capsys, one_thread
):
    """A runs folder of an older cdlaw (config.json without `inputs`) is read as trained on
    the files as they are when a sweep first meets it."""
    root, runs = copy_of(plain_a, tmp_path, monkeypatch)
    for run in runs.values():
        config = json.loads((run / "config.json").read_text())
        config.pop("inputs")
        (run / "config.json").write_text(json.dumps(config))
    assert sweep(root, one_thread).trained == []
    inputs = {k: json.loads((r / "config.json").read_text())["inputs"] for k, r in runs.items()}
    assert inputs["distill"]["files"][0]["path"] == "der" and inputs["none"]["corpus_key"]
    (root / "der" / "rows.jsonl").write_text(derived_rows("B"))
    assert "rows.jsonl changed" in refused(root, monkeypatch, capsys)


def test_a_damaged_model_leaves_the_summary_fresh_when_tasks_are_added(
    plain_a, tmp_path, monkeypatch, capsys
):
    """Adding a task to finished runs, one of whose model/ is damaged: the healthy run is
    scored and in summary.parquet, the damaged one is named, on every rerun alike."""
    root, runs = copy_of(plain_a, tmp_path, monkeypatch)
    weights = runs["distill"] / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (root / "s.toml").write_text(SWEEP.format(eval=EVAL))
    for _ in range(2):
        code, _, err = cdlaw_here(monkeypatch, capsys, root, "sweep", "s.toml", "--out", "runs")
        assert code == 0, err
        assert f"run {runs['distill'].name} is not scored on quiz" in " ".join(err.split())
        summary = pd.read_parquet(root / "runs" / "ident" / "summary.parquet")
        summary = summary.set_index("strategy")
        assert summary.loc["none", QUIZ].notna().all()
        assert summary.loc["distill", QUIZ].isna().all()


def test_a_run_that_fails_to_score_still_leaves_the_summary_fresh(
    plain_a, tmp_path, monkeypatch, one_thread
):
    """One run's scoring raising stops no other: the summary holds the other run's new
    row, and the sweep exits 1 naming the run."""
    from cdlaw.tasks import scoring as tasks

    root, runs = copy_of(plain_a, tmp_path, monkeypatch)
    score = tasks.score_saved_model

    def flaky(model_dir, *args, **kwargs):
        if Path(model_dir).parent.name == runs["distill"].name:
            raise RuntimeError("the GPU fell off")
        return score(model_dir, *args, **kwargs)

    monkeypatch.setattr(tasks, "score_saved_model", flaky)
    (root / "s.toml").write_text(SWEEP.format(eval=EVAL))
    outcome = sweep(root, one_thread)
    assert outcome.exit_code == 1
    assert [f["run_id"] for f in outcome.failures] == [runs["distill"].name]
    assert "the GPU fell off" in outcome.failures[0]["error"]
    summary = pd.read_parquet(root / "runs" / "ident" / "summary.parquet").set_index("strategy")
    assert summary.loc["none", QUIZ].notna().all()


def test_a_branch_never_starts_from_a_trunk_trained_on_other_inputs(tmp_path):
    """share = true: with --only selecting a branch, its trunk's folder is checked too."""
    from functools import partial

    from runhelpers import write_shared_sweep

    from cdlaw.sweep.selection import plan_sweep
    from cdlaw.sweep.spec import load_sweep
    from cdlaw.sweep.stale import refuse_changed_runs

    sweep = load_sweep(write_shared_sweep(tmp_path, "share"))
    plan = plan_sweep(sweep, tmp_path / "runs")
    branch, fork = next(iter(plan.forest.forks.items()))
    trunk = tmp_path / "runs" / "share" / fork.parent
    (trunk / "checkpoint").mkdir(parents=True)
    recorded = {"inputs": {"corpus_key": "0" * 20, "files": []}}
    (trunk / "config.json").write_text(json.dumps(recorded))
    check = partial(refuse_changed_runs, tmp_path / "runs" / "share")
    with pytest.raises(BadInput, match=rf"1 run\(s\) .* other tokens .*\(e\.g\. {fork.parent}\)"):
        plan_sweep(sweep, tmp_path / "runs", only=f"run_id={branch}", check_runs=check)


def tokenizer_sweep(folder: Path) -> Path:
    """A sweep file over a jsonl corpus with a tokenizer file of 300 tokens."""
    from prepare_corpora import world_texts

    from cdlaw.data.tokens.tokenizer import train_bpe

    texts = world_texts(400)
    (folder / "c.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    train_bpe(texts, 300).save(str(folder / "tok.json"))
    (folder / "s.toml").write_text(
        'name = "tok"\n[grid]\nsize = ["20K"]\nfresh_tokens = [1000]\n'
        'strategy = ["repetition"]\nderived_ratio = [0]\n'
        f'[data]\ncorpus = "{folder / "c.jsonl"}"\ntokenizer = "{folder / "tok.json"}"\n'
        "val_tokens = 2000\n"
    )
    return folder / "s.toml"


def test_runs_are_checked_before_a_corpus_with_a_tokenizer_file_is_prepared(tmp_path):
    """The run ids need the tokenizer file's vocabulary: read from the file, so that a
    refused sweep has tokenised nothing."""
    from cdlaw.sweep.selection import plan_sweep
    from cdlaw.sweep.spec import load_sweep

    seen = []

    def refuse(runs):
        seen.extend(r.model.vocab_size for r in runs)
        raise BadInput("refused")

    with pytest.raises(BadInput, match="refused"):
        plan_sweep(load_sweep(tokenizer_sweep(tmp_path)), tmp_path / "runs", check_runs=refuse)
    assert seen == [300]
    assert not list((tmp_path / "runs").rglob("meta.json"))


def test_status_of_a_tokenizer_file_sweep_without_runs_prepares_nothing(tmp_path):
    from cdlaw.sweep.summary import sweep_status

    (tmp_path / "runs" / "tok").mkdir(parents=True)
    shutil.copy(tokenizer_sweep(tmp_path), tmp_path / "runs" / "tok" / "sweep.toml")
    rows = sweep_status(tmp_path / "runs" / "tok")
    assert len(rows) == 1 and rows[0]["state"] == "pending", rows
    assert not (tmp_path / "runs" / ".cache").exists()


def test_a_reader_in_another_folder_reads_relative_inputs_where_the_sweep_did(
    plain_a, tmp_path, monkeypatch, capsys
):
    """`cdlaw status` of a project's runs from elsewhere: its relative derived and task
    paths are read in the project (config.json's inputs.workdir), not beside the reader,
    where files of the same names hold other rows."""
    root, _ = copy_of(plain_a, tmp_path, monkeypatch)
    folder = root / "runs" / "ident"
    for config in folder.glob("*/config.json"):  # as if swept in the copy
        saved = json.loads(config.read_text())
        assert saved["inputs"]["workdir"] == str(plain_a)  # recorded by the sweep
        config.write_text(
            json.dumps({**saved, "inputs": {**saved["inputs"], "workdir": str(root)}})
        )
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "der").mkdir(parents=True)
    (elsewhere / "der" / "rows.jsonl").write_text(derived_rows("B"))  # same name, other rows

    def marked() -> dict:
        code, out, _ = cdlaw_here(monkeypatch, capsys, elsewhere, "status", folder, "--json")
        assert code == 0
        return {r["strategy"]: r.get("changed") for r in json.loads(out)}

    assert marked() == {"none": None, "distill": None}  # the project's files are unchanged
    (root / "der" / "rows.jsonl").write_text(derived_rows("B"))  # the project's own, edited
    assert marked()["distill"] == ["[derived.distill] files 'der' (rows.jsonl changed)"]
    # the project moved: read in the folder the reader is in, as the next sweep there would
    moved = tmp_path / "moved"
    root.rename(moved)
    code, out, _ = cdlaw_here(monkeypatch, capsys, moved, "status", "runs/ident", "--json")
    assert code == 0 and {r["strategy"]: r.get("changed") for r in json.loads(out)}["distill"]


def test_task_chance_levels_are_read_where_the_sweep_ran(tmp_path, monkeypatch, one_thread):
    """`cdlaw downstream RUNS` from another folder finds the sweep's relative task files."""
    from cdlaw.cli.predictor_table import task_file_chance

    root = swept(workdir(tmp_path / "w", "A", "A"), one_thread)
    monkeypatch.chdir(tmp_path)  # no tasks/quiz.jsonl here
    chance = task_file_chance(root / "runs" / "ident")
    assert chance == {"quiz": pytest.approx(1 / 3)}


@pytest.mark.parametrize(
    "config, said", [('{"inputs": {"corp', "is unreadable"), (None, "is missing")]
)
def test_a_finished_run_without_a_readable_config_says_its_inputs_cannot_be_compared(
    tmp_path, config, said
):
    """Its result.json's corpus key differs from the sweep's now, and config.json, which
    records each file, is damaged: the refusal says so, not that the generator, the
    tokenizer or the split changed."""
    from runhelpers import write_shared_sweep

    from cdlaw.sweep.selection import plan_sweep
    from cdlaw.sweep.spec import load_sweep
    from cdlaw.sweep.stale import changed_inputs, refuse_changed_runs

    sweep = load_sweep(write_shared_sweep(tmp_path, "share", share=False))
    seen: list = []
    plan_sweep(sweep, tmp_path / "runs", check_runs=seen.extend)
    cfg = seen[0]
    run_dir = tmp_path / "runs" / "share" / cfg.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({"status": "done", "corpus_key": "0" * 20}))
    if config is not None:
        (run_dir / "config.json").write_text(config)
    want = f"its config.json {said}, so which input changed cannot be told"
    (what,) = changed_inputs(run_dir.parent, [cfg])[cfg.run_id]
    assert want in what and "generator" not in what
    with pytest.raises(BadInput, match=rf"^1 run\(s\) .*{want}.*pass --restart"):
        refuse_changed_runs(run_dir.parent, [cfg])
