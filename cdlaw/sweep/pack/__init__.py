"""Packing: many small runs of one shape trained in one process, one batched step for all.

    groups       which runs may share a pack (`pack_key`), `--pack` parsed, `Packing` (torch-free)
    size         how many runs a pack holds: `choose_packing`, decided once per sweep (torch-free
                 until `--pack auto` measures)
    calibration  timed packed and alone steps, what `--pack auto` measures
    model        `PackedModels`: K models' weights stacked, one batched forward and backward
    loop         `train_pack`: the packed training loop (each run's own files and numbers)
    worker       `execute_pack`: the scheduler's entry point, runs claimed under their locks

docs/packing.md explains what may share a pack and why its numbers are the run alone's.
"""
