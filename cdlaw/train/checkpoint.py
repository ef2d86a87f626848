"""Save and load a training checkpoint without pickle (docs/files.md, docs/sweep.md).

A checkpoint is a folder of three files:

    model.safetensors      the model's weights
    optimizer.safetensors  AdamW's per-parameter tensors (exp_avg, exp_avg_sq, step),
                           keyed "<parameter name>.<state name>", plus the RNG states
    state.json             plain numbers: step, tokens seen, the loop's running sums, …

The folder is written under a temporary name and swapped into place (the old one is
renamed aside first and removed last), so a run killed at any moment — even kill -9 —
leaves either the previous checkpoint or the new one, never a mix of the two.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from cdlaw.atomic import write_json_atomic

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"
RNG_PREFIX = "rng."


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
    write_json_atomic(tmp / STATE_FILE, state)

    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(path: Path) -> Path | None:
    """The checkpoint folder to resume from: path, or path.old if a swap was cut short."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".old")):
        if (candidate / STATE_FILE).exists():
            return candidate
    return None


def remove_checkpoint(path: Path) -> None:
    """Delete the checkpoint folder and any half-swapped siblings."""
    path = Path(path)
    for suffix in ("", ".tmp", ".old"):
        shutil.rmtree(path.with_name(path.name + suffix), ignore_errors=True)


def load_checkpoint(path: Path, net, optimizer) -> dict:
    """Load weights, optimizer state and RNG states in place; return the saved `state`."""
    path = Path(path)
    device = next(net.parameters()).device
    net.load_state_dict(load_file(str(path / MODEL_FILE), device=str(device)))
    tensors = load_file(str(path / OPTIMIZER_FILE))
    torch.set_rng_state(tensors.pop(RNG_PREFIX + "cpu"))
    cuda_states = sorted(k for k in tensors if k.startswith(RNG_PREFIX + "cuda"))
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors.pop(k) for k in cuda_states])
    for k in cuda_states:
        tensors.pop(k, None)
    _load_optimizer_tensors(net, optimizer, tensors)
    return json.loads((path / STATE_FILE).read_text())


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
