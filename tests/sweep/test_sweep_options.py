"""SweepOptions: every option of a sweep checked once, when the object is made, in the
sentences the CLI prints; a made one is frozen and its --pack parsed."""

import dataclasses

import pytest

from cdlaw.config import ExecConfig
from cdlaw.law import PRESETS
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.simulate import Simulation
from cdlaw.system.errors import BadInput

SIM = Simulation(PRESETS["qin2026"], "qin2026")


def test_a_made_options_object_has_its_pack_parsed_and_is_frozen():
    assert SweepOptions().pack == 1 and SweepOptions(pack="4").pack == 4
    assert SweepOptions(pack="auto").pack == "auto" and SweepOptions(pack=8).pack == 8
    options = SweepOptions(executor="simulate", simulation=SIM)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.jobs = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"executor": "slurm"}, "--executor must be local, ray or simulate, got 'slurm'"),
        ({"executor": "simulate"}, "--executor simulate needs --law"),
        ({"simulation": SIM}, "--executor simulate needs --law"),
        ({"jobs": -1}, "--jobs must be ≥ 1, got -1"),
        ({"executor": "ray", "jobs": 2}, "--jobs is for the local executor; --executor ray"),
        ({"pack": "0"}, "--pack 0: give auto or a pack size of 1 or more"),
        ({"executor": "simulate", "simulation": SIM, "pack": 2}, "a simulated sweep trains"),
        ({"exec_cfg": ExecConfig(device="mps")}, "--device must be auto, cpu, cuda or cuda:N"),
    ],
)
def test_bad_options_are_refused_in_one_sentence(fields, words):
    with pytest.raises(BadInput) as e:
        SweepOptions(**fields)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_from_cli_makes_the_exec_config_and_words_threads_as_the_option():
    options = SweepOptions.from_cli(device="cpu", threads=2, jobs=1, pack="2")
    assert options.exec_cfg == ExecConfig(device="cpu", threads=2) and options.pack == 2
    with pytest.raises(BadInput, match=r"^--threads must be ≥ 0, got -1$"):
        SweepOptions.from_cli(threads=-1)
    with pytest.raises(BadInput, match=r"^--device must be"):
        SweepOptions.from_cli(device="tpu")


def test_the_ray_executor_without_ray_says_what_the_cli_says(monkeypatch):
    """One sentence for a missing Ray, whether the CLI checks first or the executor finds it."""
    from cdlaw.cli import require_ray_extra
    from cdlaw.sweep.executors import RayExecutor

    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # unimportable here only
    with pytest.raises(BadInput) as from_executor:
        RayExecutor(None, 1, 0, lambda event: None)
    with pytest.raises(BadInput) as from_cli:
        require_ray_extra()
    assert str(from_executor.value) == str(from_cli.value)
    assert "--executor ray needs Ray" in str(from_cli.value) and "EXTRAS=dev,ray" in str(
        from_cli.value
    )
