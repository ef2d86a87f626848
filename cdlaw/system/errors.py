"""The one exception that means "the user's input is wrong" (exit code 2, docs/cli.md)."""


class BadInput(Exception):
    """Bad input: the message is one sentence naming the file, key or value and what is valid.

    Raise it before anything is written. The CLI prints the message and exits with code 2.
    """
