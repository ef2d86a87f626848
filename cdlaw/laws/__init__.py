"""The law forms cdlaw knows, by name: one declaration (a LawForm) per module.

Adding a law is one module here that builds a LawForm and one line in LAWS (docs/law.md,
"Adding a law"). A declaration imports its math from cdlaw.laws modules, never from
cdlaw.law (which imports this package).
"""

from __future__ import annotations

from cdlaw.laws.cd import CD
from cdlaw.laws.cd_overfit import CD_OVERFIT
from cdlaw.laws.chinchilla import CHINCHILLA
from cdlaw.laws.form import LawForm
from cdlaw.laws.muennighoff import MUENNIGHOFF
from cdlaw.laws.practical import PRACTICAL
from cdlaw.system.errors import BadInput

# In the order --law lists them and `cdlaw compare` fits them.
LAWS: dict[str, LawForm] = {
    "cd": CD,
    "cd-overfit": CD_OVERFIT,
    "practical": PRACTICAL,
    "muennighoff": MUENNIGHOFF,
    "chinchilla": CHINCHILLA,
}


def get_law_form(name: str) -> LawForm:
    """The declaration of a law by name; BadInput naming the known ones if there is none."""
    try:
        return LAWS[name]
    except (KeyError, TypeError):
        raise BadInput(f"unknown law {name!r}; known laws: {', '.join(LAWS)}") from None


def as_law_form(form: str | LawForm) -> LawForm:
    """A declaration, or a law's name resolved to one (a test may pass its own LawForm)."""
    return form if isinstance(form, LawForm) else get_law_form(form)
