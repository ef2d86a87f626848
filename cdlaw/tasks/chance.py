"""A task's chance level: the accuracy of guessing, the floor its accuracy link tends to
at a very high loss (cdlaw.fit.predictors).

    chance_level("hellaswag")                 -> 0.25   (4 endings)
    chance_level("arc_easy:mc")               -> 0.25   (an OLMES name: the suffix drops)
    chance_level("lambada_openai")            -> 0.0    (a cloze: no guess is right)
    chance_level("mmlu_stem")                 -> 0.25   (any MMLU subject or group)
    chance_level("my_task")                   -> None   (unknown: the floor is fitted)
    chance_level("my_task", {"my_task": 0.2}) -> 0.2    (given: --chance my_task=0.2)
    chance_of_items(items)                    -> the mean of 1/(number of choices)

Names are lm-evaluation-harness's and OLMES's task names (a `:mc`, `:rc` or `_mc`-style
suffix or `_zeroshot` variant reads as the task), Gadre et al.'s LLM Foundry names, and
cdlaw's built-in tasks (cdlaw.tasks.files). The number of choices is each benchmark's.
"""

from __future__ import annotations

# task -> number of answer choices (multiple choice), or 0 for a cloze or a generation
CHOICES = {
    # cdlaw's own (cdlaw.tasks.files)
    "world_mc": 4,
    "world_cloze": 0,
    # multiple choice, lm-eval / OLMES / LLM Foundry names
    "hellaswag": 4,
    "arc_easy": 4,
    "arc_challenge": 4,
    "openbookqa": 4,
    "openbook_qa": 4,
    "mmlu": 4,
    "piqa": 2,
    "winogrande": 2,
    "winograd": 2,
    "wsc": 2,
    "wsc273": 2,
    "boolq": 2,
    "copa": 2,
    "commonsense_qa": 5,
    "csqa": 5,
    "siqa": 3,
    "social_iqa": 3,
    "socialiqa": 3,
    "pubmed_qa_labeled": 3,
    "pubmedqa": 3,
    "sciq": 4,
    "logi_qa": 4,
    "logiqa": 4,
    "math_qa": 5,
    "mathqa": 5,
    "agi_eval_lsat_ar": 5,
    "agi_eval_lsat_lr": 5,
    "agi_eval_lsat_rc": 5,
    "agi_eval_sat_en": 4,
    "bigbench_strategy_qa": 2,
    "bigbench_novel_concepts": 4,
    "bigbench_conceptual_combinations": 4,
    "bigbench_misconceptions": 2,
    "winogender_mc_female": 3,
    "winogender_mc_male": 3,
    # cloze or generation: chance is 0
    "lambada": 0,
    "lambada_openai": 0,
    "squad": 0,
    "coqa": 0,
    "jeopardy": 0,
    "triviaqa": 0,
    "bigbench_qa_wikidata": 0,
    "bigbench_operators": 0,
    "bigbench_dyck_languages": 0,
    "bigbench_cs_algorithms": 0,
    "bigbench_repeat_copy_logic": 0,
    "simple_arithmetic_nospaces": 0,
    "simple_arithmetic_withspaces": 0,
}
_SUFFIXES = (":mc", ":rc", ":cf", "_mc", "_rc", "_zeroshot", "_0shot", "_5shot")


def chance_level(task: str, given: dict[str, float] | None = None) -> float | None:
    """The task's chance accuracy: `given` first, then its number of choices; None when
    neither knows it."""
    if given and task in given:
        return float(given[task])
    name = task.strip().lower()
    if name.startswith("mmlu"):  # every MMLU subject and group: four choices
        return 0.25
    for _ in range(2):
        if name in CHOICES:
            n = CHOICES[name]
            return 1.0 / n if n else 0.0
        for s in _SUFFIXES:
            if name.endswith(s):
                name = name[: -len(s)]
                break
    return None


def chance_of_items(items) -> float:
    """The chance level of a task file's items: the mean over items of 1/(its choices),
    0 for cloze items (cdlaw.tasks.files.TaskItem)."""
    n = [len(getattr(it, "choices", ()) or ()) for it in items]
    return float(sum(1.0 / k if k else 0.0 for k in n) / len(n)) if n else 0.0
