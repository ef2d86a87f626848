"""Packing, the sweep's side: which runs train together in one process, how many, and the
task that trains them. The packed training itself is cdlaw.train.packed_loop (the step) and
cdlaw.train.packed_model (the stacked models), beside the run alone's loop.

    groups       `--pack` parsed, `Packing` (torch-free); which runs may share a pack is
                 cdlaw.train.packable.pack_key
    size         how many runs a pack holds: `choose_packing`, decided once per sweep (torch-free
                 until `--pack auto` measures)
    calibration  timed packed and alone steps, what `--pack auto` measures
    worker       `execute_pack`: the scheduler's entry point, runs claimed under their locks

docs/packing.md explains what may share a pack and why its numbers are the run alone's.
"""
