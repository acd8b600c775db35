"""Start-up checks: the whole configuration against this machine, before the daemon serves anything.

The same checks back `tuner daemon --check` and `tuner doctor --config FILE`, in dry run (`check_startup`): the
state directory must be one the daemon can create and write (`tuner.daemon.state.unusable_dir`, which the
daemon's own `StateStore.ensure` runs first); `[host.options]` is checked against the host factory's signature,
then the host is built -- a real host tries every part (NIC coalescing and driver profile, DVFS backend and cores,
RAPL, the QPS source, the latency source) and names every one that cannot work -- and the knob space must leave
something inside `[knobs]`. Every problem is one `FILE:LINE: field: ...` line at the key it comes from
(`locate_problem`), all of them in one `StartupError` (exit status `core.errors.EXIT_CONFIG`, which the systemd
unit does not restart on): nothing is retried in a loop.

Observe mode needs only the sensors (QPS, latency; energy if there is any); tuning needs every part.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from actuators.abilities import Closable
from actuators.host import Host
from core.errors import StartupError, TunerError

MODES = ("tune", "observe")
#: What observe mode builds of a host whose factory takes `parts` (the real host): sensors only, energy optional.
OBSERVE_PARTS = {"parts": ("energy", "qps", "latency"), "optional": ("energy",)}
#: Characters of a problem's text an error line keeps (its start and end; the rest is elided, its length said).
PROBLEM_MAX = 400


def host_options(
    spec: str, options: dict[str, Any], mode: str, *, dry_run: bool = False, server: str = "memcached"
) -> dict[str, Any]:
    """`[host.options]` plus what the mode sets: observe builds no knobs on a factory that can leave them out;
    `dry_run` forces the factory's dry run (doctor: nothing can be written); a `server` other than memcached is the
    default `qps` (the kind on 127.0.0.1) and the prober's protocol, on a factory that takes `qps` and `latency` (the
    real host's options)."""
    from tuner.hosts import factory_options

    names, _, var_kw = factory_options(spec)
    out = dict(options)
    if server != "memcached" and (("qps" in names and "latency" in names) or var_kw):
        from actuators.latency.servers import default_spec

        out.setdefault("qps", default_spec(server))
        latency = out.get("latency")
        if isinstance(latency, dict) and latency.get("kind", "prober") == "prober":
            out["latency"] = {"protocol": server, **latency}
    if mode == "observe" and all(k in names for k in OBSERVE_PARTS):
        out.update(OBSERVE_PARTS)
    if dry_run and ("dry_run" in names or var_kw):
        out["dry_run"] = True
    return out


def is_dry_run(options: dict[str, Any]) -> bool:
    return bool(options.get("dry_run"))


def clipped(text: str, limit: int = PROBLEM_MAX) -> str:
    """`text` on one line, at most about `limit` characters: its start and end kept, the length said."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return f"{text[: limit * 2 // 3]}...{text[-limit // 4 :]} ({len(text)} characters)"


def locate_problem(config: Any, table: str, key: str | None, message: str) -> str:
    """`FILE:LINE: table.key: message` at the key's line in the config's text (its table's header when the key is
    not written; `table.key: message` for a config not read from a file)."""
    from tuner.config.checks import Checker

    path, text = getattr(config, "path", None), getattr(config, "source", "")
    checker = Checker(Path(path) if path is not None else Path("<config>"), text or "")
    checker.error(table, key, clipped(message))
    line = checker.errors[0]
    return line if path is not None else line.split(": ", 1)[1]


def host_problem(config: Any, problem: str) -> str:
    """A problem of building the host, at the `[host.options]` key it names first as a word (not inside a path or
    a flag), else at `[host]`."""
    spec, options = config.host.spec, config.host.options
    problem = problem.removeprefix(f"{spec}: ").removeprefix(f"--host {spec!r}: ")
    named = [
        (m.start(), key) for key in options if (m := re.search(rf"(?<![\w/.-]){re.escape(key)}(?![\w/-])", problem))
    ]
    if named:
        return locate_problem(config, "host.options", min(named)[1], problem)
    return locate_problem(config, "host", None, problem)


def state_problems(config: Any) -> list[str]:
    """The state directory's problem (`state.dir` line), found without writing; [] when the daemon can use it."""
    from tuner.daemon.state import unusable_dir

    reason = unusable_dir(Path(config.state_dir))
    return [] if reason is None else [state_problem(config, reason)]


def store_problems(config: Any) -> list[str]:
    """A SQLite trial store at a path SQLite cannot open (`history.url`); [] otherwise."""
    from tuner.config.checks import shown
    from tuner.daemon.state import SQLITE_PATH_MAX

    url = config.history.url
    if url.startswith("sqlite:///") and len(os.fsencode(url[len("sqlite://") :] + "-journal")) > SQLITE_PATH_MAX:
        message = f"expected a path SQLite can open (at most {SQLITE_PATH_MAX} bytes), got {shown(url)}"
        return [locate_problem(config, "history", "url", message)]
    return []


def before_start(config: Any) -> list[str]:
    """What `tuner daemon` checks before it starts anything (the state directory and the host are checked by
    the start itself): the servers' socket and files, the trial store's path."""
    return serving_problems(config) + store_problems(config)


def state_problem(config: Any, reason: str) -> str:
    from tuner.config.checks import shown

    message = f"expected a directory the daemon can create and write, got {shown(str(config.state_dir))}: {reason}"
    return locate_problem(config, "state", "dir", message)


def serving_problems(config: Any) -> list[str]:
    """What starting the servers would refuse, found without binding anything: a unix socket whose directory
    cannot be made or written (`grpc.listen`), a file `[grpc]` names that cannot be read (the token must not be
    empty). `tuner daemon` runs this before it starts, `--check` with the rest."""
    from tuner.config.checks import shown
    from tuner.daemon.state import unusable_dir

    problems = []
    grpc = config.grpc
    if grpc.listen.startswith("unix:"):
        path = grpc.listen[len("unix:") :]
        path = path[2:] if path.startswith("//") else path
        reason = unusable_dir(Path(path).parent)
        if reason is not None:
            problems.append(
                locate_problem(
                    config,
                    "grpc",
                    "listen",
                    f"cannot create the socket's directory {shown(str(Path(path).parent))}: {reason}",
                )
            )
    for key in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
        file = getattr(grpc, key)
        try:
            data = b"x" if file is None else file.read_bytes()
        except OSError as exc:
            problems.append(
                locate_problem(config, "grpc", key, f"cannot read {shown(str(file))}: {exc.strerror or exc}")
            )
            continue
        if key == "token_file" and not data.strip():  # as `tuner.config.read_token` reads it
            problems.append(locate_problem(config, "grpc", key, f"expected a non-empty token in {shown(str(file))}"))
    return problems


def build_host(config: Any, *, dry_run: bool = False) -> Host:
    """The configured host, built after checking its options; a `StartupError` listing every problem."""
    from tuner.daemon.plain import bounded_space
    from tuner.hosts import check_options, make_host

    spec, options, mode = config.host.spec, dict(config.host.options), getattr(config.host, "mode", "tune")
    problems = check_options(spec, options, "")
    if problems:
        raise StartupError([host_problem(config, p) for p in problems])
    try:
        server = getattr(config.host, "server", "memcached")
        host = make_host(spec, **host_options(spec, options, mode, dry_run=dry_run, server=server))
    except TunerError as exc:
        raise StartupError([host_problem(config, p) for p in getattr(exc, "problems", None) or [str(exc)]]) from None
    if mode != "observe":
        try:
            bounded_space(host.knobs(), config.knobs)
        except TunerError as exc:
            _close(host)
            raise StartupError([locate_problem(config, "knobs", None, str(exc))]) from None
    return host


def check_config(config: Any) -> list[str]:
    """Every problem building the host finds (doctor's `--config`); the host is built in dry run and closed."""
    try:
        host = build_host(config, dry_run=True)
    except StartupError as exc:
        return list(exc.problems)
    _close(host)
    return []


def check_startup(config: Any) -> list[str]:
    """Every problem the daemon's start-up would find, found in dry run (`tuner daemon --check`): no knob written,
    no server bound, no state written, no process left: the state directory, the servers' socket and files
    (`serving_problems`), the trial store's path, then the host (`check_config`)."""
    return state_problems(config) + before_start(config) + check_config(config)


def _close(host: Any) -> None:
    if isinstance(host, Closable):
        host.close()
