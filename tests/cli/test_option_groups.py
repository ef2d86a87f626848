"""takes_group: options declared once reach a command as one typed object, listed in --help
where the command's group parameter stands."""

from dataclasses import dataclass

import typer
from typer.testing import CliRunner

from cdlaw.cli.option_groups import takes_group


@dataclass(frozen=True)
class Shape:
    width: int = 1
    tall: bool = False


SHAPE = {
    "width": typer.Option(1, "--width", help="How wide."),
    "tall": typer.Option(False, "--tall", help="Stand it up."),
}


def toy_app(seen: list) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @takes_group("shape", Shape, SHAPE)
    def draw(
        name: str = typer.Argument(...),
        shape: Shape = Shape(),
        loud: bool = typer.Option(False, "--loud"),
    ) -> None:
        seen.append((name, shape, loud))

    return app


def test_the_group_arrives_as_one_object_with_the_values_given():
    seen: list = []
    result = CliRunner().invoke(toy_app(seen), ["box", "--width", "3", "--tall", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen == [("box", Shape(width=3, tall=True), True)]


def test_the_groups_options_are_listed_where_the_group_stands():
    help_text = CliRunner().invoke(toy_app([]), ["--help"]).output
    at = [help_text.index(o) for o in ("--width", "--tall", "--loud")]
    assert at == sorted(at) and "How wide." in help_text and "--shape" not in help_text
