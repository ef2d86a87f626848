"""Counts read as English and comparisons show their difference: "1 epoch", never "1 epochs";
"needs 1.8104e+21 FLOPs, more than the budget 1.81e+21", never the same number twice."""

import numpy as np
import pytest
from plantedcurves import RATIO, planted_frame

from cdlaw.govern.curve import Curve, check_stable
from cdlaw.govern.governor import GovernOptions, govern
from cdlaw.plan.result import Allocation
from cdlaw.plan.source import load_law
from cdlaw.units import counted, format_apart


@pytest.mark.parametrize(
    "x, noun, plural, text",
    [
        (1, "run", "", "1 run"),
        (0, "run", "", "0 runs"),
        (2, "cell", "", "2 cells"),
        (1.0004, "epoch", "", "1 epoch"),  # reads as 1 at three digits
        (4.8192, "epoch", "", "4.82 epochs"),
        (1.0, "pass", "", "1 pass"),
        (11.6, "paraphrase pass", "", "11.6 paraphrase passes"),
        (1234, "run", "", "1,234 runs"),
        (3, "analysis", "analyses", "3 analyses"),
    ],
)
def test_a_count_names_its_noun_in_the_number_it_reads_as(x, noun, plural, text):
    assert counted(x, noun, plural) == text


def test_two_numbers_print_apart_with_as_few_digits_as_tell_them_apart():
    assert format_apart(1.8104e21, 1.81e21) == ("1.8104e+21", "1.81e+21")
    assert format_apart(2e12, 1.81e21) == ("2e+12", "1.81e+21")  # apart at three digits
    a, b = format_apart(1.81e21 * (1 + 3e-9), 1.81e21)
    assert a != b and float(a) > float(b)


def allocation(strategy: str, derived: float) -> Allocation:
    return Allocation("cd-optimal", 1e6, 1e9, derived, strategy, 3.0)


def test_a_plan_of_about_one_epoch_or_one_pass_says_it_in_the_singular():
    assert allocation("repetition", 4e5).uses == "1 epoch"  # 1.0004 epochs
    assert allocation("repetition", 3.8192e9).uses == "4.82 epochs"
    assert allocation("paraphrase", 1e9).uses == "1 pass"
    assert allocation("paraphrase", 2e9).uses == "2 passes"
    assert allocation("none", 0.0).uses == "1 epoch"


def test_a_planned_end_past_the_budget_shows_the_difference():
    n, fresh, budget = 100e6, 1e9, 1e19
    frame = planted_frame(np.linspace(2e8, 3e9, 40))
    curve = check_stable(Curve(tokens=frame["tokens"].to_numpy(float),
                              loss=frame["loss"].to_numpy(float),
                              lr=frame["lr"].to_numpy(float), source="planted",
                              loss_column="loss", n_params=n, fresh_tokens=fresh,
                              strategy="repetition", decay_frac=0.2))  # fmt: skip
    planned = budget / (6 * n) * 1.0002  # 0.02% past the budget: the same at three digits
    options = GovernOptions(budget, fresh, planned_tokens=planned, cooldown=RATIO)
    decision = govern(curve, load_law("qin2026"), options)
    said = [w for w in decision.warnings if "more than the budget" in w]
    assert said == ["the planned end, 1.667e+10 tokens, needs 1.0002e+19 FLOPs, more than "
                    "the budget 1e+19"], decision.warnings  # fmt: skip
