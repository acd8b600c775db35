"""Errors that the CLI turns into one-line messages (never a traceback)."""

import errno


class TunerError(Exception):
    """A user-facing error: its message is one line saying what was wrong and what was expected."""


class KnobRangeError(TunerError):
    """A knob value outside what the host supports; raised before anything reaches hardware."""


#: errnos after which the same operation cannot succeed by retrying it: the kernel or driver does not support it
#: (EOPNOTSUPP), the device or file is gone (ENODEV, ENXIO, ENOENT), or the process may not do it (EPERM, EACCES,
#: EROFS). EBUSY, EAGAIN, EIO, EINVAL (a value one driver refuses) and the rest are taken as transient.
PERMANENT_ERRNOS = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENODEV, errno.ENXIO, errno.ENOENT, errno.EPERM, errno.EACCES, errno.EROFS}
)


class HostError(TunerError):
    """The host could not do what was asked (permission, missing driver, failed read-back, ...).

    `permanent` is True when retrying cannot help (the NIC has no coalescing, a cpufreq file is gone, a
    capability is missing): the daemon then stops tuning and restores the OS's settings instead of retrying
    (docs/daemon.md, "Faults at run time"). Transient faults (the default) are retried with a capped back-off.
    """

    def __init__(self, message: str = "", *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def permanent_errno(code: int | None) -> bool:
    """Whether an `OSError` with this errno is one retrying cannot fix (`PERMANENT_ERRNOS`)."""
    return code in PERMANENT_ERRNOS


def is_permanent(exc: BaseException) -> bool:
    """True for a `HostError` marked permanent (anything else is taken as transient)."""
    return isinstance(exc, HostError) and exc.permanent


class UnreachableError(HostError):
    """A remote source (a BMC, a Prometheus server) did not answer: connection refused, a timeout, or an HTTP 5xx
    (it is up but cannot serve now). Transient, and -- unlike an answer saying the request is wrong (a refused
    login, no such chassis or series) -- no reason to give up on the source when it happens at start-up."""


class HostPartsError(HostError):
    """Several parts of a host cannot be built; `problems` lists each (`part: why`)."""

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems), permanent=True)


class InputError(TunerError):
    """Bad input in a file: the message starts with `FILE:LINE:` where a line is known."""


#: Exit status of a daemon whose configuration does not fit the machine (sysexits' EX_CONFIG): the systemd
#: unit does not restart on it (`RestartPreventExitStatus=`), since a restart cannot fix it.
EXIT_CONFIG = 78


class ConfigError(InputError):
    """The daemon's configuration file is invalid (each line `FILE:LINE: field: ...`): exit status `EXIT_CONFIG`,
    like failed start-up checks, so systemd does not restart into the same error."""

    exit_status = EXIT_CONFIG


class StartupError(TunerError):
    """The configuration cannot work on this machine (found before serving): every problem in one message,
    exit status `EXIT_CONFIG`."""

    exit_status = EXIT_CONFIG

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__(f"start-up checks: {len(self.problems)} problem(s): " + "; ".join(self.problems))
