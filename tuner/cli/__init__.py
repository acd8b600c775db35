"""The `tuner` command line: argument parsing (`app`) and one module per command."""

from tuner.cli.app import main

__all__ = ["main"]
