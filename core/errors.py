"""Errors that the CLI turns into one-line messages (never a traceback)."""


class TunerError(Exception):
    """A user-facing error: its message is one line saying what was wrong and what was expected."""


class KnobRangeError(TunerError):
    """A knob value outside what the host supports; raised before anything reaches hardware."""


class HostError(TunerError):
    """The host could not do what was asked (permission, missing driver, failed read-back, ...)."""


class InputError(TunerError):
    """Bad input in a file: the message starts with `FILE:LINE:` where a line is known."""
