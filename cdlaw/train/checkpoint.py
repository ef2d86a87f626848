"""Save and load a training checkpoint without pickle (docs/files.md, docs/sweep.md).

A checkpoint is a folder of three files:

    model.safetensors      the model's weights
    optimizer.safetensors  AdamW's per-parameter tensors (exp_avg, exp_avg_sq, step),
                           keyed "<parameter name>.<state name>", plus the RNG states
    state.json             plain numbers: step, tokens seen, the loop's running sums, …
                           and the SHA-256 of the two files above

The folder is written under a temporary name and swapped into place (the old one is
renamed aside first and removed last), so a run killed at any moment — even kill -9 —
leaves either the previous checkpoint or the new one, never a mix of the two.

A checkpoint is read whole and checked (every file there, complete, its checksum, the
model's own weights and optimizer state) before anything is loaded into the model. One
that fails is set aside as checkpoint.bad/ and named in one line; the run resumes from
checkpoint.old/ when that one is whole, else restarts from step 0 (cdlaw.train.damage).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from cdlaw.system.atomic import write_json_atomic
from cdlaw.train.damage import (
    DIGESTS,
    STATE_FILE,
    TENSOR_FILES,
    checkpoint_problem,
    file_sha256,
    report_damage,
    set_aside,
    unreadable,
)

MODEL_FILE, OPTIMIZER_FILE = TENSOR_FILES
RNG_PREFIX = "rng."


class CheckpointDamaged(Exception):
    """A checkpoint file is missing, cut short, corrupt, or not this run's."""

    def __init__(self, file: Path, problem: str):
        super().__init__(f"{file} {problem}")
        self.file = file
        self.problem = problem


@dataclass
class Checkpoint:
    """A checkpoint read and checked, not yet loaded into the model."""

    path: Path
    weights: dict
    tensors: dict  # the optimizer's state and the RNG states
    state: dict


def save_checkpoint(path: Path, net, optimizer, state: dict) -> None:
    """Write net's weights, optimizer's state, the RNG states and `state` to folder `path`."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    old = path.with_name(path.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    save_file(_contiguous(net.state_dict()), str(tmp / MODEL_FILE))
    tensors = _optimizer_tensors(net, optimizer)
    tensors[RNG_PREFIX + "cpu"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"{RNG_PREFIX}cuda{i}"] = s
    save_file(_contiguous(tensors), str(tmp / OPTIMIZER_FILE))
    digests = {name: file_sha256(tmp / name) for name in (MODEL_FILE, OPTIMIZER_FILE)}
    write_json_atomic(tmp / STATE_FILE, {**state, DIGESTS: digests})

    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def newest_checkpoint(path: Path, net, optimizer, like: dict) -> Checkpoint | None:
    """The checkpoint to resume from, read and checked: path, or path.old if a swap was cut
    short. Each one that fails is set aside (<name>.bad/) and named in one line; None when
    none is left (the run starts from step 0). `like`: the state a fresh run starts with."""
    path = Path(path)
    damaged, found = [], None
    for candidate in (path, path.with_name(path.name + ".old")):
        if not candidate.is_dir():
            continue
        try:
            found = read_checkpoint(candidate, net, optimizer, like)
            break
        except CheckpointDamaged as e:
            damaged.append((e, candidate.name, set_aside(candidate).name))
    then = (
        f"the run resumes from step {found.state['step']} ({found.path.name}/)"
        if found
        else "the run restarts from step 0"
    )
    for why, name, bad in damaged:
        report_damage(f"{why}; {name}/ set aside as {bad}/: {then}")
    return found


def remove_checkpoint(path: Path) -> None:
    """Delete the checkpoint folder and any half-swapped siblings."""
    path = Path(path)
    for suffix in ("", ".tmp", ".old"):
        shutil.rmtree(path.with_name(path.name + suffix), ignore_errors=True)


def read_checkpoint(path: Path, net, optimizer, like: dict) -> Checkpoint:
    """Read a checkpoint folder whole and check it against the model, loading nothing.

    Raises CheckpointDamaged naming the first file that is missing, cut short, differs
    from its checksum, or does not fit: state.json must hold every key of `like` (a fresh
    state) and its run_id; the weights and optimizer state must be this model's.
    """
    path = Path(path)
    if found := checkpoint_problem(path, like["run_id"]):
        raise CheckpointDamaged(path / found[0], found[1])
    state_path = path / STATE_FILE
    state = json.loads(state_path.read_text())
    # JSON has no NaN: a number not known yet (no validation loss before the first
    # evaluation) was written as null; it comes back as the NaN it was.
    for key, fresh in like.items():
        if isinstance(fresh, float) and key in state and state[key] is None:
            state[key] = math.nan
    state.pop(DIGESTS, None)  # checked by checkpoint_problem
    if missing := [k for k in like if k not in state]:
        raise CheckpointDamaged(state_path, f"lacks {', '.join(missing)}")
    loaded = {}
    device = next(net.parameters()).device
    for name, on in ((MODEL_FILE, device), (OPTIMIZER_FILE, "cpu")):
        try:
            loaded[name] = load_file(str(path / name), device=str(on))
        except Exception as e:  # safetensors' SafetensorError and kin
            raise CheckpointDamaged(path / name, unreadable(e)) from None
    weights, tensors = loaded[MODEL_FILE], loaded[OPTIMIZER_FILE]
    own = net.state_dict()
    if weights.keys() != own.keys() or any(weights[k].shape != v.shape for k, v in own.items()):
        raise CheckpointDamaged(path / MODEL_FILE, "holds another model's weights")
    params = dict(net.named_parameters())
    for key, value in tensors.items():
        name, _, what = key.rpartition(".")
        if key.startswith(RNG_PREFIX):
            continue
        if name not in params or (what.startswith("exp_avg") and value.shape != params[name].shape):
            raise CheckpointDamaged(path / OPTIMIZER_FILE, "holds another model's optimizer state")
    if RNG_PREFIX + "cpu" not in tensors:
        raise CheckpointDamaged(path / OPTIMIZER_FILE, "lacks the RNG state")
    return Checkpoint(path, weights, tensors, state)


def apply_checkpoint(checkpoint: Checkpoint, net, optimizer) -> dict:
    """Load a checked checkpoint's weights, optimizer and RNG states in place; return its state."""
    net.load_state_dict(checkpoint.weights)
    tensors = dict(checkpoint.tensors)
    torch.set_rng_state(tensors.pop(RNG_PREFIX + "cpu"))
    cuda_states = sorted(k for k in tensors if k.startswith(RNG_PREFIX + "cuda"))
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors.pop(k) for k in cuda_states])
    for k in cuda_states:
        tensors.pop(k, None)
    _load_optimizer_tensors(net, optimizer, tensors)
    return checkpoint.state


# ---------------------------------------------------------------------------------------


def _contiguous(tensors: dict) -> dict:
    # safetensors refuses shared or non-contiguous storage; a clone is cheap at these sizes.
    return {k: v.detach().contiguous().clone() for k, v in tensors.items()}


def _param_names(net, optimizer) -> list[list[str]]:
    """For each param group, the names of its parameters, in the optimizer's order."""
    name_of = {id(p): n for n, p in net.named_parameters()}
    return [[name_of[id(p)] for p in group["params"]] for group in optimizer.param_groups]


def _optimizer_tensors(net, optimizer) -> dict:
    out = {}
    for group, names in zip(optimizer.param_groups, _param_names(net, optimizer), strict=True):
        for p, name in zip(group["params"], names, strict=True):
            for key, value in optimizer.state.get(p, {}).items():
                value = value if torch.is_tensor(value) else torch.tensor(value)
                out[f"{name}.{key}"] = value
    return out


def _load_optimizer_tensors(net, optimizer, tensors: dict) -> None:
    for group, names in zip(optimizer.param_groups, _param_names(net, optimizer), strict=True):
        for p, name in zip(group["params"], names, strict=True):
            prefix = name + "."
            state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            if not state:
                continue
            on_device = group.get("fused") or group.get("capturable")
            for key, value in state.items():
                # AdamW keeps "step" as a float32 CPU scalar unless fused or capturable.
                state[key] = value if key == "step" and not on_device else value.to(p.device)
            optimizer.state[p] = state
