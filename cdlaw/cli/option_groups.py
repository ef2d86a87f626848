"""Options that travel together, declared once and handed to a command as one typed object.

    @app.command()
    @takes_group("run", RunArgs, RUN_OPTIONS)
    def adapt(seed_file: Path = ..., run: RunArgs = RUN, json_out: bool = ...): ...

The decorator puts each of `declarations` (a dataclass field name → its typer.Option, in
the order --help lists them) in the command line where the command's parameter `param`
stands, and calls the command with them gathered into `cls`. typer reads the command's
signature, so the options, their names and their help are exactly those declared.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import fields
from typing import Any, get_type_hints


def takes_group(param: str, cls: type, declarations: dict[str, Any]):
    """Declare `declarations` on a command in place of its parameter `param`, typed as
    `cls`'s fields; the command receives them as one `cls`."""
    types = get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    assert list(declarations) == names, (cls, list(declarations))

    def decorate(command):
        own = inspect.signature(command, eval_str=True)
        params = []
        for p in own.parameters.values():
            if p.name != param:
                params.append(p)
                continue
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            for name, option in declarations.items():
                params.append(inspect.Parameter(name, kind, default=option, annotation=types[name]))

        @functools.wraps(command)
        def with_group(**given):
            group = cls(**{name: given.pop(name) for name in names})
            return command(**given, **{param: group})

        with_group.__signature__ = own.replace(parameters=params)
        with_group.__annotations__ = {p.name: p.annotation for p in params}
        return with_group

    return decorate
