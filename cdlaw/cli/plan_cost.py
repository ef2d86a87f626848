"""The "training cost" panel of `cdlaw plan`: the planned model's shape, its memory for
weights, gradients, AdamW state and activations, whether it fits the GPU given
(--gpu-memory-gib), and its GPU hours (cdlaw.plan.memory computes them)."""

from __future__ import annotations

from rich.panel import Panel
from rich.table import Table

from cdlaw.cli import out
from cdlaw.units import format_number as fmt
from cdlaw.units import grouped


def render_cost(m: dict) -> None:
    """The panel of a plan's `memory` (Plan.to_dict()["memory"]) printed to stdout."""
    s = m["shape"]
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column()
    t.add_row(
        "shape",
        "",
        f"d_model {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, "
        f"MLP {s['mlp_hidden']} ({s['source']})",
    )
    t.add_row(
        "weights",
        f"{grouped(m['weights_gib'], 1)} GiB",
        f"{fmt(m['n_params_total'])} params with the input embedding, bf16",
    )
    t.add_row("gradients", f"{grouped(m['gradients_gib'], 1)} GiB", "bf16")
    t.add_row(
        "AdamW state",
        f"{grouped(m['optimizer_gib'], 1)} GiB",
        "fp32 master weights + two fp32 moments",
    )
    t.add_row(
        "activations",
        f"{grouped(m['activations_gib'], 1)} GiB",
        f"{m['micro_batch']} × {m['seq_len']} tokens, bf16, flash attention, no checkpointing",
    )
    t.add_row(
        "total", f"[bold]{grouped(m['total_gib'], 1)} GiB[/]", "plus CUDA context / fragmentation"
    )
    if m["gpu_memory_gib"] is not None:
        if m["fits"]:
            verdict = f"[green]fits[/] in {m['gpu_memory_gib']:g} GiB"
        elif m["min_gpus_sharded"]:
            verdict = (
                f"[red]does not fit[/] in {m['gpu_memory_gib']:g} GiB; sharded (FSDP) over "
                f"≥ {grouped(m['min_gpus_sharded'])} GPUs it does"
            )
        else:
            verdict = (
                f"[red]does not fit[/] in {m['gpu_memory_gib']:g} GiB even sharded: lower "
                "--micro-batch or --seq-len, or checkpoint activations"
            )
        t.add_row("fits?", "", verdict)
    if m["gpu_hours"] is not None:
        t.add_row(
            "GPU hours",
            grouped(m["gpu_hours"]),
            f"at {m['gpu_flops']:.3g} FLOP/s × MFU {m['mfu']:g} "
            f"({grouped(m['gpu_hours_with_attention'])} with attention FLOPs)",
        )
    out.print(Panel(t, title="training cost", title_align="left", expand=False))
