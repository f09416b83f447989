"""The command's argparse parser class: every command and subcommand parser is one of these
(argparse makes subparsers of their parent's class), so each flag's help says its default."""

from __future__ import annotations

import argparse
from typing import Any


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Ends a flag's help with `(default: VALUE)` where it has a default worth stating: not for a
    switch (store_true), a flag whose default is unset (None, an empty list: its help says what
    happens then), a required one, or help that already names its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.nargs == 0 or action.required or default is None or default is argparse.SUPPRESS
                or default == [] or "default" in text.lower()):
            return text
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows the flags' defaults (DefaultsHelpFormatter)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)
