"""`--pack auto` times the steps training runs (cdlaw.sweep.pack.calibration): it calls the
functions train_run and train_pack step with, and keeps no arithmetic of its own to drift
from them when the step changes."""

import ast
import inspect

from tinyrun import make_cfg

from cdlaw.config import ExecConfig
from cdlaw.sweep.pack import calibration
from cdlaw.train import loop, packed_loop, packed_step

CPU = ExecConfig(device="cpu", threads=1)
# what a step is made of: a module that calls one of these trains a step of its own
STEP_PARTS = {"backward", "clip_grad_norm_", "clip_grads", "adamw_step", "lm_losses", "train_loss"}


def test_the_calibration_keeps_no_copy_of_a_training_step():
    tree = ast.parse(inspect.getsource(calibration))
    called = {
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
    }
    assert not called & STEP_PARTS, f"calibration.py steps by itself: {called & STEP_PARTS}"
    assert {"optimizer_step", "packed_step"} <= called
    assert calibration.optimizer_step is loop.optimizer_step  # train_run's step
    assert calibration.packed_step is packed_loop.packed_step  # train_pack's step


def test_the_timed_steps_are_train_packs_and_equal_a_run_alones(monkeypatch):
    """pack_step steps through packed_step, as train_pack does; a pack of one
    and the run alone give the same cross-entropy bit for bit on their first step (the
    same weights and tokens), so the pack's time is weighed against the same work."""
    cfg = make_cfg()
    stepped = []
    real = packed_step.packed_step

    def spy(models, *args, **kwargs):
        stepped.append(models.param.shape[0])
        return real(models, *args, **kwargs)

    monkeypatch.setattr(calibration, "packed_step", spy)
    pack = calibration.pack_step(cfg, 1, CPU)
    alone = calibration.alone_step(cfg, CPU)
    first_pack, first_alone = pack(), alone()
    assert stepped == [1]
    assert first_pack.shape == (1,) and first_pack[0].item() == first_alone.item()
    assert calibration.pack_step(cfg, 3, CPU)().shape == (3,) and stepped == [1, 3]
