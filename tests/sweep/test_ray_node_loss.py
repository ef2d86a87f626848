"""A Ray node that dies under a sweep (docs/cli.md, "Ray"): the runs it held go to a live
node, each said to have lost its node, and the sweep finishes; a run is failed only once
its node died MAX_NODE_LOSSES times under it (retry_after). Ray's own exception classes
decide what is a node's death (node_lost)."""

import os
import signal

import pytest

from cdlaw.config import ExecConfig
from cdlaw.sweep.events import RunRetried
from cdlaw.sweep.executors import node_lost
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.scheduler import MAX_NODE_LOSSES, MAX_TASK_FAILURES, Tries, retry_after

ray = pytest.importorskip("ray")


def test_a_nodes_death_is_told_from_the_runs_own_failure_by_rays_classes():
    from ray.exceptions import (
        LocalRayletDiedError,
        NodeDiedError,
        RayTaskError,
        TaskCancelledError,
        WorkerCrashedError,
    )

    assert node_lost(NodeDiedError("The node with node id: ab12 has been marked dead"))
    assert node_lost(LocalRayletDiedError())
    assert not node_lost(WorkerCrashedError())  # the worker died: the run's, as locally
    assert not node_lost(TaskCancelledError())
    assert not node_lost(RayTaskError("f", "Traceback …", ValueError("the run's own")))
    assert not node_lost(RuntimeError("LocalRayletDiedError"))  # by class, not by name


def test_a_run_goes_out_again_after_node_deaths_apart_from_its_own_failures():
    tries, again = Tries(), True
    for n in range(1, MAX_NODE_LOSSES):
        tries, again = retry_after(tries, node_lost=True)
        assert again and tries == Tries(0, n)
    tries, again = retry_after(tries, node_lost=False)  # a node lost is not the run's fault
    assert again and tries == Tries(1, MAX_NODE_LOSSES - 1)
    assert retry_after(tries, node_lost=True) == (Tries(1, MAX_NODE_LOSSES), False)
    assert retry_after(tries, node_lost=False) == (Tries(MAX_TASK_FAILURES, 2), False)
    assert retry_after(Tries(), node_lost=False) == (Tries(1, 0), True)


@pytest.mark.slow
def test_a_sweep_whose_ray_node_dies_starts_ray_anew_and_finishes(
    runs_root, write_sweep, monkeypatch
):
    """The local Ray's raylet killed right after the first run went out (as a killed
    ray::DashboardAgent takes it down): every later task would fail with
    LocalRayletDiedError on that node. The sweep starts Ray anew, says so of each run it
    held, and finishes every run (it once failed 3 of 4, "failed twice outside training")."""
    from cdlaw.sweep import executors

    if ray.is_initialized():
        ray.shutdown()
    killed: list[int] = []
    submit = executors.RayExecutor.submit

    def submit_then_kill_the_raylet(self, task):
        future = submit(self, task)
        if not killed:  # the raylet this process started with its local Ray
            raylet = ray._private.worker._global_node.all_processes["raylet"][0].process
            os.kill(raylet.pid, signal.SIGKILL)
            raylet.wait()
            killed.append(raylet.pid)
        return future

    monkeypatch.setattr(executors.RayExecutor, "submit", submit_then_kill_the_raylet)
    events: list = []
    outcome = run_sweep(
        write_sweep(runs_root, "node-dies", sizes='"20K"'),
        runs_root,
        SweepOptions(executor="ray", exec_cfg=ExecConfig(device="cpu", threads=1)),
        on_event=events.append,
    )
    assert killed
    assert outcome.exit_code == 0 and set(outcome.statuses.values()) == {"done"}
    retried = [e for e in events if isinstance(e, RunRetried)]
    assert retried, "no run lost its node"
    assert all(e.reason.startswith("its Ray node died (LocalRayletDiedError)") for e in retried)
    assert not ray.is_initialized()  # the Ray it started anew is shut down with the sweep
