"""Errors that the CLI turns into one-line messages (never a traceback)."""


class TunerError(Exception):
    """A user-facing error: its message is one line saying what was wrong and what was expected."""


class KnobRangeError(TunerError):
    """A knob value outside what the host supports; raised before anything reaches hardware."""


class HostError(TunerError):
    """The host could not do what was asked (permission, missing driver, failed read-back, ...)."""


class HostPartsError(HostError):
    """Several parts of a host cannot be built; `problems` lists each (`part: why`)."""

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


class InputError(TunerError):
    """Bad input in a file: the message starts with `FILE:LINE:` where a line is known."""


#: Exit status of a daemon whose configuration does not fit the machine (sysexits' EX_CONFIG): the systemd
#: unit does not restart on it (`RestartPreventExitStatus=`), since a restart cannot fix it.
EXIT_CONFIG = 78


class StartupError(TunerError):
    """The configuration cannot work on this machine (found before serving): every problem in one message,
    exit status `EXIT_CONFIG`."""

    exit_status = EXIT_CONFIG

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__(f"start-up checks: {len(self.problems)} problem(s): " + "; ".join(self.problems))
