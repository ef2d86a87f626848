"""How to install an optional extra (pyproject.toml): the one place that words the advice
every "this install lacks X" message ends with.

    raise BadInput(f"--tracker wandb needs wandb, which this install lacks; install {install_advice('wandb')}")

cdlaw is installed from its clone (`make setup`, or pip from the clone's root), so the
advice is a command to run there, never `pip install 'cdlaw[…]'`, a name no package index
serves. An extra that brings torch pins the CPU build in the same pip command, as the
Makefile does: unpinned, pip pulls a multi-GB CUDA torch.
"""

from __future__ import annotations

from cdlaw.system.errors import BadInput

# The Makefile's TORCH_SPEC and its CPU wheel index (tests/test_examples.py checks the pin).
TORCH_PIN = "torch==2.13.0"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The corpus reader (cdlaw.data.files.sources) as the train extra pins it: all that
# `cdlaw paraphrase --endpoint` needs beyond the base install.
DATASETS_SPEC = "datasets>=3"
# Extras that bring torch (ray and dev include train), and the `make setup` that installs
# each (its EXTRAS default to dev).
WITH_TORCH = {
    "train": "make setup",
    "dev": "make setup",
    "ray": "make setup EXTRAS=dev,ray",
    "lm-eval": "make setup EXTRAS=dev,lm-eval",
}


def install_advice(extra: str) -> str:
    """'the EXTRA extra: run `…` in the cdlaw clone', to follow "install" in a message."""
    pip = f"pip install -e '.[{extra}]'"
    if extra not in WITH_TORCH:
        return f"the {extra} extra: run `{pip}` in the cdlaw clone"
    return (
        f"the {extra} extra: run `{WITH_TORCH[extra]}` in the cdlaw clone, or "
        f"`{pip} {TORCH_PIN} --extra-index-url {CPU_TORCH_INDEX}` there "
        "(CPU torch; see the README for CUDA)"
    )


def ray_missing() -> BadInput:
    """The error for `--executor ray` where this install cannot import Ray (raise it
    `from None`: the ImportError says nothing more)."""
    return BadInput(
        f"--executor ray needs Ray, which this install cannot import; install "
        f"{install_advice('ray')}."
    )
