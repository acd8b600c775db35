"""`tuner daemon --config FILE`: run the tuning service (systemd Type=notify) until SIGTERM/SIGINT.

Exit statuses: 0 after SIGTERM/SIGINT (knobs restored); 78 (EX_CONFIG, `core.errors.EXIT_CONFIG`) when the
config file is invalid or unreadable or the start-up checks fail (`--check` runs them too, in dry run) -- systemd
does not restart on it; 2 for a command-line usage error (argparse) and other errors at start (an address in use); 1 when the
control loop crashed (knobs restored; systemd restarts it).
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import sys
import threading
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "daemon",
        help="run the tuning daemon (gRPC API, Prometheus metrics, retunes hourly and on load change)",
        description="Run the tuner as a service: tune on start, hourly and when the load leaves its band, "
        "hold the chosen ITR/DVFS with an SLA guardrail, serve gRPC and /metrics. SIGHUP reloads the "
        "config; SIGTERM/SIGINT restore the original knobs and exit 0.",
    )
    p.add_argument("--config", "-c", default="/etc/tuner/tuner.toml", help="TOML config (default: %(default)s)")
    p.add_argument(
        "--check",
        action="store_true",
        help="validate the config and run the start-up checks in dry run, then exit (0 if the daemon would start, "
        "78 if not: one line per problem)",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.check:
        check(args.config)
        print(f"{args.config}: OK")
        return 0
    return serve(args.config, log_level=args.log_level)


def check(path: str) -> Any:
    """`--check`: the config read and validated, then the daemon's start-up checks run in dry run
    (`tuner.daemon.startup.check_startup`: no knob written, no server bound, no state written); a `ConfigError`
    with one `FILE:LINE: field: ...` line per problem, the lines the daemon itself would refuse to start with."""
    from core.errors import ConfigError
    from tuner.daemon.startup import check_startup

    config = read_config(path)
    problems = check_startup(config)
    if problems:
        raise ConfigError("\n".join(problems))
    return config


def start(config: Any, *, optimizers: Any = None) -> Any:
    """The daemon of `config`, started (state opened, host built, servers bound, READY sent) the way
    `tuner daemon` starts it; what the start-up checks refuse is a `ConfigError` (exit status 78) with the
    `FILE:LINE: field: ...` lines `--check` prints, and whatever did start is stopped again."""
    from core.errors import ConfigError, InputError, StartupError
    from tuner.daemon.loop import Daemon
    from tuner.daemon.startup import before_start, state_problem
    from tuner.daemon.state import StateDirError

    problems = before_start(config)  # as `--check` finds them: before anything is bound or written
    if problems:
        raise ConfigError("\n".join(problems))
    daemon = Daemon(config, optimizers=optimizers)
    try:
        daemon.start()
    except InputError as exc:  # a file the config names changed between the check above and the start
        daemon._shutdown()
        raise ConfigError(str(exc)) from None
    except StartupError as exc:  # what `--check` reports too: one `FILE:LINE: field: ...` line per problem
        daemon._shutdown()
        raise ConfigError("\n".join(exc.problems)) from None
    except StateDirError as exc:  # the state directory cannot be created or written (exit 78, like --check)
        daemon._shutdown()
        raise ConfigError(state_problem(config, exc.reason)) from None
    except BaseException:
        daemon._shutdown()  # restore knobs and close what did start
        raise
    return daemon


def read_config(path: str) -> Any:
    """The validated config; a `ConfigError` (one `FILE:LINE: field: ...` line per problem, exit status 78,
    which the systemd unit does not restart on) when the file is invalid or unreadable."""
    from core.errors import ConfigError, InputError
    from tuner.config import load_config

    try:
        return load_config(path)
    except InputError as exc:
        raise ConfigError(str(exc)) from None


def serve(config_path: str, *, optimizers: Any = None, log_level: str = "info") -> int:
    """Run the daemon from `config_path` with signal handling; returns the exit status (0 after SIGTERM)."""
    from core.errors import TunerError
    from core.memory import limit_arenas

    config = read_config(config_path)
    journald = bool(os.environ.get("JOURNAL_STREAM"))
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s" if journald else "%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    limit_arenas()  # before any thread starts: a steady RSS over months (core.memory)
    # Signal handlers only queue the signal (SimpleQueue.put is reentrant); the main thread acts on it, and
    # the control loop runs on its own thread -- no lock is ever taken inside a signal handler.
    signals: queue.SimpleQueue = queue.SimpleQueue()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda n, _frame: signals.put(n))
    daemon = start(config, optimizers=optimizers)
    result: list[int] = []

    def loop() -> None:
        log = logging.getLogger("tuner.daemon.loop")
        try:
            result.append(daemon.run())
        except TunerError as exc:  # e.g. a knob a permanent fault made unwritable could not be restored at stop
            log.error("control loop ended: %s", exc)
            result.append(1)
        except Exception:
            log.exception("control loop failed")  # the stop path logged whether the original ITR/DVFS are back
            result.append(1)

    thread = threading.Thread(target=loop, name="tuner-loop")
    thread.start()
    while thread.is_alive():
        try:
            signum = signals.get(timeout=0.5)
        except queue.Empty:
            continue
        if signum == signal.SIGHUP:
            daemon.request_reload()
        else:
            daemon.request_stop()
    thread.join()
    return result[0] if result else 1
