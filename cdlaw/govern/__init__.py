"""The compute governor (`cdlaw govern`, docs/govern.md): a run's curve from any trainer's
log (logs, curve), its planned lr schedule (lr_plan), the schedule-aware curve laws fitted
to it (schedule_laws, continuation, curve_run) and the decision they make (curve_governor),
which model decides (model), and the WSD relation for cdlaw's own WSD runs (cooldown,
pairs, run_loss, governor).
"""
