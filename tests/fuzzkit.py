"""Mutation fuzzing of the two parsers users feed files to: the daemon's config loader (`tuner daemon --check`)
and the trace parser (`tuner trace stats`), through the CLI as a user runs them.

A valid input (the example config, the head of the bundled sample trace) is mutated -- bytes deleted, inserted,
replaced, lines duplicated, a value swapped for a hostile one -- and the command must either succeed or exit 2
with one line per problem that names the file, and never raise. Used by `tests/system/test_fuzz_mutation.py` (a few
hundred examples) and `bench/fuzz.py` (a larger run).

`check_then_start` takes a mutant further: after `--check`, the daemon's own start-up on the same file (the
simulated host, in process): what --check accepts must start and answer GetStatus, what it refuses the start-up
must refuse with 78 and lines --check printed (`tests/system/test_fuzz_check_start.py`, `bench/fuzz.py --targets
start`).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import zstandard
from hypothesis import strategies as st

from traces.schedule import sample_trace_path
from tuner.cli.app import main

REPO = Path(__file__).resolve().parents[1]

#: Values a config key may be given: wrong types, out of range, paths the OS cannot take.
HOSTILE_VALUES = (
    '"' + "a" * 3000 + '"',
    '"a\\u0000b"',
    '"/proc/self/mem"',
    '"../../../../../../etc/shadow"',
    '"/dev/null"',
    '"~/x"',
    '""',
    '"' + "d/" * 2100 + '"',
    "-1",
    "0",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "99999999999999999999",
    "true",
    "[]",
    "[1, 2, 3]",
    '["a", 1]',
    "{}",
    "{ x = 1 }",
    '"sim"',
    '"real"',
    '"os:system"',
    '"unix:///' + "s" * 200 + '"',
    '"0.0.0.0:1"',
    '"[::1]:99999"',
    '"postgresql://"',
    '"sqlite:///"',
    "1979-05-27T07:32:00Z",
    '"\u202e\u00e9\U0001f600"',
)

#: Mutations: (kind, position, payload); position is taken modulo the input's size.
MUTATION = st.tuples(
    st.sampled_from(("delete", "insert", "replace", "dup-line", "drop-line", "value", "truncate")),
    st.integers(0, 1 << 30),
    st.one_of(
        st.binary(max_size=12),
        st.sampled_from([b"\n", b",", b"=", b"[", b"]", b'"', b"\x00", b"\xff", b"-", b"9" * 20, b"\r\n", b"#"]),
    ),
)
MUTATIONS = st.lists(MUTATION, min_size=1, max_size=5)


def mutate(base: bytes, mutations: list[tuple[str, int, bytes]], values: tuple[str, ...] = HOSTILE_VALUES) -> bytes:
    """Apply `mutations` to `base` (deterministic: same input, same output)."""
    data = base
    for kind, pos, payload in mutations:
        lines = data.split(b"\n")
        if kind == "delete" and data:
            i = pos % len(data)
            data = data[:i] + data[i + 1 + (pos >> 20) % 16 :]
        elif kind == "insert":
            i = pos % (len(data) + 1)
            data = data[:i] + payload + data[i:]
        elif kind == "replace" and data:
            i = pos % len(data)
            data = data[:i] + payload + data[i + len(payload) :]
        elif kind == "dup-line" and lines:
            i = pos % len(lines)
            data = b"\n".join(lines[: i + 1] + lines[i:])
        elif kind == "drop-line" and lines:
            i = pos % len(lines)
            data = b"\n".join(lines[:i] + lines[i + 1 :])
        elif kind == "value":  # a `key = value` line gets a hostile value
            keyed = [j for j, line in enumerate(lines) if re.match(rb"^\s*[A-Za-z_][\w.]*\s*=", line)]
            if keyed:
                j = keyed[pos % len(keyed)]
                key = lines[j].split(b"=", 1)[0]
                lines[j] = key + b"= " + values[(pos >> 8) % len(values)].encode()
                data = b"\n".join(lines)
        elif kind == "truncate" and data:
            data = data[: pos % len(data)]
    return data


def config_base() -> bytes:
    """The example config, made to point its state at a relative directory and its socket into /tmp (`--check`
    runs the start-up checks in dry run: it writes neither, but the places must be ones a user may write)."""
    text = (REPO / "deploy" / "tuner.example.toml").read_text()
    text = text.replace('dir = "/var/lib/tuner"', 'dir = "state"')
    return text.replace('"unix:///run/tuner/tuner.sock"', '"unix:///tmp/tuner-fuzz/t.sock"').encode()


def trace_base(lines: int = 120) -> bytes:
    """The first `lines` rows of the bundled sample trace, as plain CSV."""
    reader = zstandard.ZstdDecompressor().stream_reader(sample_trace_path().open("rb"))
    text = io.TextIOWrapper(reader, encoding="utf-8")
    return "".join(next(text) for _ in range(lines)).encode()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`tuner ARGV` in process: (exit status, stdout, stderr). Any exception escaping `main` propagates."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def problems_with_errors(code: int, err: str, path: Path, failure: int = 2) -> list[str]:
    """What is wrong with a failed run's stderr: exit status `failure`, one line per problem, each naming the file."""
    if code == 0:
        return []
    bad = []
    if code != failure:
        bad.append(f"exit status {code}, expected 0 or {failure}")
    if "Traceback" in err:
        bad.append("a traceback")
    lines = err.splitlines()
    if not lines:
        bad.append("no error message")
    for n, line in enumerate(lines):
        text = line.removeprefix("tuner: error: ") if n == 0 else line
        if not (text.startswith(str(path)) or text.startswith(repr(str(path))[:40])):
            bad.append(f"line {n + 1} does not start with the file: {line[:120]!r}")
        if len(line) > 1000:
            bad.append(f"line {n + 1} is {len(line)} characters long")
    return bad


def check_config(tmp: Path, data: bytes) -> tuple[int, list[str]]:
    """`tuner daemon --check` on `data`: a bad config exits with EX_CONFIG (78), like failed start-up checks."""
    from core.errors import EXIT_CONFIG

    path = tmp / "tuner.toml"
    path.write_bytes(data)
    code, _, err = run_cli(["daemon", "--check", "--config", str(path)])
    return code, problems_with_errors(code, err, path, failure=EXIT_CONFIG)


def check_trace(tmp: Path, data: bytes, *, skip_bad: bool) -> tuple[int, list[str]]:
    path = tmp / "trace.csv"
    path.write_bytes(data)
    argv = ["trace", "stats", str(path), "--bin", "10", "--json", "--max-span-days", "1"]
    code, out, err = run_cli(argv + (["--skip-bad"] if skip_bad else []))
    bad = problems_with_errors(code, err, path)
    if code == 0:
        try:
            json.loads(out)
        except ValueError:
            bad.append("--json output is not JSON")
    return code, bad


# ------------------------------------------------------------------ `--check` against the real start-up (sim host)

#: Outcomes of `check_then_start`: what --check said and what the daemon's own start-up did with the same file.
START_OUTCOMES = ("accepted-and-started", "refused-with-78", "accepted-not-started", "refused-not-started")


def start_base(tmp: Path) -> bytes:
    """The example config made to start under `tmp` on the simulated host: state in `tmp/state`, the gRPC socket
    in `tmp`, metrics on an ephemeral loopback port -- those three tables first, so that a truncated mutant
    still names them rather than the defaults outside `tmp`."""
    text = config_base().decode().replace('"unix:///tmp/tuner-fuzz/t.sock"', f'"unix://{tmp}/t.sock"')
    text = text.replace('listen = "127.0.0.1:9464"', 'listen = "127.0.0.1:0"')
    sections = re.split(r"(?m)^(?=\[)", text)
    first = [sec for sec in sections if sec.startswith(("[state]", "[grpc]", "[metrics]"))]
    return "".join(first + [sec for sec in sections if sec not in first]).encode()


def _inside(path: Path | None, tmp: Path) -> bool:
    return path is None or Path(path).resolve().is_relative_to(tmp.resolve())


def outside_sandbox(config, tmp: Path) -> str | None:
    """Why starting the daemon of `config` could write or bind outside `tmp` and loopback (None: it cannot): a
    host other than the simulator, a state directory elsewhere that the start would create, a socket elsewhere,
    a fixed or non-loopback port, a trial store elsewhere."""
    from tuner.config import is_loopback
    from tuner.daemon.state import unusable_dir

    grpc, history = config.grpc, config.history
    socket = Path(grpc.listen.removeprefix("unix:").removeprefix("//")) if grpc.listen.startswith("unix:") else None
    checks = {
        "host": config.host.spec == "sim" and "load" not in config.host.options,
        "state.dir": _inside(config.state_dir, tmp) or unusable_dir(Path(config.state_dir)) is not None,
        "grpc.listen": _inside(socket, tmp) if socket else is_loopback(grpc.listen) and grpc.listen.endswith(":0"),
        "metrics.listen": config.metrics_listen is None
        or (is_loopback(config.metrics_listen) and config.metrics_listen.endswith(":0")),
        "history": _inside(history.file, tmp)
        and (history.url == "" or history.url.startswith("sqlite:///") and _inside(Path(history.url[10:]), tmp)),
    }
    bad = [key for key, ok in checks.items() if not ok]
    return ", ".join(bad) or None


def _get_status(daemon) -> None:
    """`GetStatus` over the daemon's own gRPC address (with its token); an `RpcError` if it does not answer."""
    import grpc

    from tuner.daemon.service import protos

    cfg = daemon.config.grpc
    if cfg.tls_cert is not None:
        return  # a TLS server: its client certificate is the mutant's business
    pb, services = protos()
    metadata = [("authorization", f"Bearer {cfg.token_file.read_bytes().strip().decode()}")] if cfg.token_file else []
    with grpc.insecure_channel(daemon.grpc_address) as channel:
        services.TunerStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10, metadata=metadata)


def real_start(path: Path, tmp: Path) -> tuple[str, int, list[str]]:
    """The daemon's own start-up on the config at `path` (in process, as `tuner daemon` starts it, a light
    optimiser and no control loop): ("started" after it answered GetStatus and stopped, "refused" with its exit
    status and lines, or "not-tried" with why: it could write or bind outside `tmp`)."""
    from core.errors import ConfigError, TunerError
    from tests.daemon_fakes import FakeOptimizers
    from tuner.cli.daemon import read_config, start

    try:
        config = read_config(str(path))
    except ConfigError as exc:
        return "refused", exc.exit_status, str(exc).splitlines()
    why = outside_sandbox(config, tmp)
    if why is not None:
        return "not-tried", 0, [why]
    try:
        daemon = start(config, optimizers=FakeOptimizers())
    except TunerError as exc:
        return "refused", int(getattr(exc, "exit_status", 2)), str(exc).splitlines()
    try:
        _get_status(daemon)
    finally:
        daemon._shutdown()
    return "started", 0, []


def check_then_start(tmp: Path, data: bytes) -> tuple[str, list[str]]:
    """`tuner daemon --check` on `data`, then the daemon's own start-up on the same file: (outcome, what is
    wrong). What --check accepts must start and answer GetStatus; what it refuses (78, `FILE:LINE` lines) the
    start-up must refuse with 78 and lines --check printed too."""
    from core.errors import EXIT_CONFIG

    path = tmp / "tuner.toml"
    path.write_bytes(data)
    code, _, err = run_cli(["daemon", "--check", "--config", str(path)])
    bad = problems_with_errors(code, err, path, failure=EXIT_CONFIG)
    checked = err.removeprefix("tuner: error: ").splitlines()
    started, status, lines = real_start(path, tmp)
    if started == "not-tried":
        return ("accepted-not-started" if code == 0 else "refused-not-started"), bad
    if code == 0 and started != "started":
        bad.append(f"--check accepted it, the start-up refused it with {status}: {lines[:3]}")
    if code != 0 and started == "started":
        bad.append(f"--check refused it ({checked[:3]}), the daemon started")
    if code != 0 and started == "refused":
        if status != EXIT_CONFIG:
            bad.append(f"the start-up refused it with {status}, not {EXIT_CONFIG}: {lines[:3]}")
        bad += [f"a start-up line --check did not print: {line[:200]!r}" for line in lines if line not in checked]
    return ("accepted-and-started" if code == 0 else "refused-with-78"), bad
