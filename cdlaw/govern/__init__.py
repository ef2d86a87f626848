"""The compute governor (`cdlaw govern`, docs/govern.md): a run's curve so far (curve), the
stable-to-cooled relation of WSD (cooldown), the decision to continue, switch strategy or
cool down now (governor), and the schedule-aware curve laws it was chosen against
(schedule_laws).
"""
