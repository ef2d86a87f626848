"""`cdlaw version`."""

from cdlaw import __version__
from cdlaw.cli import app


@app.command()
def version() -> None:
    """Print cdlaw's version.

    Example: cdlaw version
    """
    print(__version__)
