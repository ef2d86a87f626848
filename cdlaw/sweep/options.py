"""How a sweep runs (SweepOptions): what to train, where, how many at once, packed or not.

One frozen object, checked once when it is made, for `cdlaw sweep` and Python callers
alike: run_sweep and dry_run_sweep take it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdlaw.config import ExecConfig
from cdlaw.sweep.pack.groups import parse_pack
from cdlaw.sweep.simulate import Simulation
from cdlaw.system.errors import BadInput
from cdlaw.train.trackers import require_trackers

EXECUTORS = ("local", "ray", "simulate")


@dataclass(frozen=True)
class SweepOptions:
    """The options of one sweep; every field is checked in __post_init__ (BadInput, one
    sentence naming the CLI option), so a made SweepOptions is one a sweep can run.

    Make it with keywords: SweepOptions(executor="simulate", simulation=sim).
    """

    # --only: a filter of the sweep's runs ('n_params<1e6,seed=0'); None: every run
    only: str | None = None
    # --restart: delete the selected runs' folders (all of them when the file changed) first
    restart: bool = False
    # where runs train: "local" (this machine), "ray" (a cluster), "simulate" (drawn from
    # `simulation`'s law, no training)
    executor: str = "local"
    # --jobs: parallel runs on the local executor; 0: one per core (CPU) or per GPU
    jobs: int = 0
    # --ray-address: the Ray cluster; None: start a local Ray
    ray_address: str | None = None
    # device, precision, compile, threads and trackers of every run
    exec_cfg: ExecConfig = field(default_factory=ExecConfig)
    # with executor "simulate" (and only then): the law and noise each loss is drawn from
    simulation: Simulation | None = None
    # --pack: "auto", or the most runs of one shape per pack (1: each run alone). Given as
    # text or a number; after __post_init__ it is "auto" or an int ≥ 1
    pack: str | int = 1

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise BadInput(f"--executor must be local, ray or simulate, got {self.executor!r}")
        if (self.executor == "simulate") != (self.simulation is not None):
            raise BadInput(
                "--executor simulate needs --law (a preset or a fit.json), and --law needs it"
            )
        if self.jobs < 0:
            raise BadInput(f"--jobs must be ≥ 1, got {self.jobs}")
        if self.jobs and self.executor != "local":
            raise BadInput(
                f"--jobs is for the local executor; --executor {self.executor} runs as many "
                "runs at once as it has CPUs (by --threads) or GPUs: drop --jobs."
            )
        object.__setattr__(self, "pack", parse_pack(str(self.pack)))
        if self.simulation is not None and self.pack != 1:
            raise BadInput("--pack packs training: a simulated sweep trains nothing; drop --pack")
        _check_exec(self.exec_cfg)

    @classmethod
    def from_cli(
        cls,
        *,
        device: str = "auto",
        precision: str = "auto",
        compile: bool = False,
        threads: int = 0,
        tracker: str = "",
        **fields,
    ) -> SweepOptions:
        """The options from the command line's values: --device, --precision, --compile,
        --threads and --tracker ("tensorboard,mlflow") make the ExecConfig, `fields` the
        rest."""
        from cdlaw.train.trackers import tracker_names

        _check_threads(threads)  # ExecConfig would word it otherwise; the rest: __post_init__
        trackers = tracker_names(tracker)  # a missing package: refused now, dry run included
        exec_cfg = ExecConfig(
            device=device,
            precision=precision,  # type: ignore[arg-type]  # checked by ExecConfig
            compile=compile,
            threads=threads,
            trackers=trackers,  # type: ignore[arg-type]  # checked by tracker_names
        )
        return cls(exec_cfg=exec_cfg, **fields)


def _check_exec(exec_cfg: ExecConfig) -> None:
    """--device, --threads and --tracker as a run can use them."""
    _check_device(exec_cfg.device)
    _check_threads(exec_cfg.threads)
    require_trackers(exec_cfg.trackers)  # a missing package is said before any run starts


def _check_device(device: str) -> None:
    if device != "auto" and not (device == "cpu" or device.startswith("cuda")):
        raise BadInput(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")


def _check_threads(threads: int) -> None:
    if threads < 0:
        raise BadInput(f"--threads must be ≥ 0, got {threads}")
