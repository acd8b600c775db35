"""`RealHost`: the `Host` protocol on real hardware -- ITR, DVFS, RAPL energy, offered QPS and latency.

Every write goes through one `HardwareIO` (dry run: logged, not made) inside a `Transaction` (original
persisted before the first write; all of a call's writes undone if any part fails). `restore()` puts back
the persisted originals -- also those of a previous process that died -- and then forgets them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actuators.abilities import AtomicApply, Closable, HardwareClassified, Interruptible, Warns
from actuators.host import Host, KnobSpace, Measurement, OperatingPoint
from actuators.hwclass import HardwareClass
from actuators.latency.memcached import same_server
from actuators.latency.servers import parse_address, server_of
from actuators.linux.dvfs import DvfsBackend, choose_backend, parse_cpu_list
from actuators.linux.hwio import HardwareIO, NicIoctl, Transaction, UnavailableNic, describe
from actuators.linux.itr import NicItr, physical_interfaces
from actuators.linux.originals import OriginalsStore, RestoreReport, default_state_dir, restore_originals
from actuators.linux.rapl import discover_meter
from actuators.power.kinds import build_source
from actuators.power.source import EnergyReading, EnergySource
from actuators.power.window import CompareSources
from actuators.sensors import LatencySource, QpsSource, ServerStats, WarningSource
from core.errors import HostError, HostPartsError

log = logging.getLogger(__name__)


@dataclass
class RealHost(Host, AtomicApply, Closable, HardwareClassified, Interruptible, Warns):
    """A real machine: `actuators.host.Host` and the abilities `AtomicApply`, `Closable`, `HardwareClassified`,
    `Interruptible` and `Warns` (`actuators.abilities`). Components may be None (e.g. `tuner set --itr` needs no
    DVFS or meters); calls that need a missing component raise `HostError` saying which."""

    io: HardwareIO
    store: OriginalsStore
    itr: NicItr | None = None
    dvfs: DvfsBackend | None = None
    energy: EnergySource | None = None
    compare: CompareSources = field(default_factory=CompareSources)  # energy sources shown beside, never tuned on
    energy_optional: bool = False  # observe mode: an energy fault makes energy unknown instead of failing
    qps: QpsSource | None = None
    latency: LatencySource | None = None
    qps_sample_s: float = 1.0
    probe_counts_in_qps: bool = False  # the prober's own requests are in the QPS counter: subtract them
    clock: Callable[[], float] = time.monotonic
    name: str = "real"
    warnings: list[str] = field(default_factory=list)  # DVFS read-back warnings of the last `apply`
    absent: dict[str, str] = field(default_factory=dict)  # optional parts that could not be built, and why
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _qps_last: tuple[float, float] | None = field(default=None, repr=False)
    _energy_unknown: bool = field(default=False, repr=False)  # the last window's energy was lost (optional energy)

    # -- knobs ---------------------------------------------------------------------------------
    def _need(self, part: str) -> Any:
        obj = getattr(self, part)
        if obj is None:
            raise HostError(
                f"this RealHost was built without {part} (configure it: see `tuner doctor`)", permanent=True
            )
        return obj

    def knobs(self) -> KnobSpace:
        return KnobSpace(self._need("itr").values(), self._need("dvfs").frequencies())

    def set_itr(self, itr_us: int) -> None:
        self.apply(itr_us=itr_us)

    def set_dvfs(self, ghz: float) -> None:
        self.apply(dvfs_ghz=ghz)

    def apply(self, itr_us: int | None = None, dvfs_ghz: float | None = None) -> list[str]:
        """Set DVFS then ITR in one transaction: everything is validated before the first write, and if
        any write or read-back fails, every value this call changed is put back. Returns warnings (DVFS read-back, and
        NICs whose driver applied another rx-usecs than its profile says, the first time for each)."""
        itr, dvfs = (
            self._need("itr") if itr_us is not None else None,
            self._need("dvfs") if dvfs_ghz is not None else None,
        )
        dvfs_plan = dvfs.plan(dvfs_ghz) if dvfs is not None else []
        itr_plan = itr.plan(itr_us) if itr is not None else []
        warnings: list[str] = []
        itr_notes: list[str] = []
        with Transaction(self.io, self.store) as txn:
            for setting in dvfs_plan:
                txn.write(setting)
            if dvfs is not None and not self.io.dry_run:
                warnings += dvfs.verify(dvfs_ghz)
            for setting in itr_plan:
                txn.write(setting)
            if itr is not None and not self.io.dry_run:
                itr_notes = itr.verify(itr_us)  # new read-back mismatches; the host keeps them in `itr.notes`
        self.warnings = warnings
        return warnings + itr_notes

    def point(self) -> OperatingPoint | None:
        if self.itr is None or self.dvfs is None:  # built without knobs (observe): the OS is in charge
            return None
        itr_us = self._need("itr").current()
        ghz = self._need("dvfs").current()
        return None if itr_us is None or ghz is None else OperatingPoint(itr_us, ghz)

    def restore(self) -> None:
        self.restore_report()

    def restore_report(self) -> RestoreReport:
        """Put back every persisted original (this process's and any dead one's), then forget them."""
        return restore_originals(self.io, self.store)

    # -- sensors -------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Make a running `measure` stop early with `HostError` (thread-safe)."""
        self._stop.set()

    def offered_qps(self) -> float:
        """Requests/s since the previous call, or over `qps_sample_s` if there was none recently."""
        qps = self._need("qps")
        now, total = self.clock(), float(qps.total_requests())
        last = self._qps_last
        if last is None or now - last[0] < 0.1 or now - last[0] > 60.0:
            if self._stop.wait(self.qps_sample_s):
                self._stop.clear()
                raise HostError("offered-QPS sample interrupted")
            last = (now, total)
            now, total = self.clock(), float(qps.total_requests())
        self._qps_last = (now, total)
        return max(total - last[1], 0.0) / (now - last[0]) if now > last[0] else 0.0

    def measure(self, seconds: float) -> Measurement:
        """Energy, latency and request counts over the same `seconds`-long window (blocks for it)."""
        if not seconds > 0:
            raise HostError(f"measure window {seconds!r} s: expected > 0")
        energy = self.energy if "energy" in self.absent else self._need("energy")
        qps, latency = self._need("qps"), self._need("latency")
        point = self.point()
        latency.begin()
        q0 = float(qps.total_requests())
        try:
            t0 = self.clock()  # before the sources' first read: a BMC's read takes ~0.1 s, inside the window
            energy = self._energy_begin(energy)
            deadline = t0 + seconds
            while (left := deadline - self.clock()) > 0:
                if self._stop.wait(min(left, self._poll_interval_s(energy))):
                    raise HostError("measurement interrupted")
                energy = self._energy_step(energy, lambda e: e.poll())
                self.compare.poll()
            reading = self._energy_end(energy)
            compared = self.compare.end()
            q1 = float(qps.total_requests())
            t1 = self.clock()
        except BaseException:
            with contextlib.suppress(Exception):  # close the window; the first error is the one to report
                latency.end()
            self._stop.clear()
            raise
        window = latency.end()
        self._stop.clear()
        elapsed = t1 - t0
        # the probes memcached counted: those sent (a window's `requests` also holds the probes still owed at its
        # end, recorded at their age but never sent)
        probes = window.requests - int(getattr(window, "incomplete", 0))
        served = q1 - q0 - (probes if self.probe_counts_in_qps else 0)
        rate = max(served, 0.0) / elapsed
        self._qps_last = (t1, q1)
        return Measurement(
            seconds=elapsed,
            offered_qps=rate,
            achieved_qps=rate,
            requests=window.requests,
            latency_us=dict(window.latency_us),
            latency_ci_us=dict(window.latency_ci_us),
            energy_j=reading.energy_j if reading is not None else 0.0,
            point=point,
            energy_by_zone_j=dict(reading.by_zone_j) if reading is not None else {},
            ci_known=bool(getattr(window, "ci_known", True)),
            latency_dist=getattr(window, "latency_dist", None),
            energy_known=reading is not None,
            energy_source=energy.info.source if energy is not None else "",
            energy_updates=reading.updates if reading is not None else None,
            energy_compare_j={name: r.energy_j for name, r in compared.items()},
            energy_compare_by_zone_j={name: dict(r.by_zone_j) for name, r in compared.items()},
        )

    # -- energy sources: the main one's faults (unknown energy when optional), the compared ones -----------------
    def _poll_interval_s(self, energy: EnergySource | None) -> float:
        own = energy.poll_interval_s if energy is not None else 1.0
        return min(own, self.compare.poll_interval_s) if self.compare.sources else own

    def _energy_fault(self, exc: HostError) -> None:
        """Optional energy (observe mode): a permanent fault drops the source (energy unknown from now on, said
        in `absent`); a transient one leaves this window's energy unknown (a warning for the first window of a
        run of them, not each). Otherwise the caller's, as before."""
        if not self.energy_optional:
            raise exc
        if exc.permanent:
            self.absent["energy"] = f"{exc} (reported as unknown)"
            self.energy = None
            log.warning("energy source dropped, energy is unknown from now on: %s", exc)
        elif not self._energy_unknown:
            log.warning("energy unknown for this window (and the next, until the source reads again): %s", exc)
        else:
            log.debug("energy unknown for this window: %s", exc)
        self._energy_unknown = True

    def _energy_step(self, energy: EnergySource | None, step: Callable[[EnergySource], object]) -> EnergySource | None:
        """`step(energy)`; None from now on in this window when it fails and energy is optional."""
        if energy is None:
            return None
        try:
            step(energy)
        except HostError as exc:
            self._energy_fault(exc)
            return None
        return energy

    def _energy_begin(self, energy: EnergySource | None) -> EnergySource | None:
        self.compare.begin()
        return self._energy_step(energy, lambda e: e.begin())

    def _energy_end(self, energy: EnergySource | None) -> EnergyReading | None:
        if energy is None:
            return None
        try:
            reading = energy.end()
        except HostError as exc:
            self._energy_fault(exc)
            return None
        if self._energy_unknown:
            log.info("energy known again (source %s)", energy.info.source)
            self._energy_unknown = False
        return reading

    def warnings_by_source(self) -> dict[str, list[str]]:
        """What limits this host's measurements, by source: "energy" -- parts that could not be built (e.g. no
        RAPL: energy unknown), "latency" -- the latency source's warnings (a same-host prober cannot see ITR
        delay; a failing source says so instead of raising), "dvfs" -- read-back warnings of the last `apply`,
        "itr" -- NICs whose driver applied another rx-usecs than its profile says (kept, one line per NIC)."""
        latency: list[str] = []
        if isinstance(self.latency, WarningSource):
            try:
                latency = [str(w) for w in self.latency.warnings()]
            except Exception as exc:  # noqa: BLE001 - a warning source must not stop its reader
                latency = [f"latency source warnings unavailable: {exc}"]
        compared = [f"energy source {name} (compared): {why}" for name, why in self.compare.problems.items()]
        return {
            "energy": [f"{part} unavailable: {why}" for part, why in self.absent.items()] + compared,
            "latency": latency,
            "dvfs": [str(w) for w in self.warnings],
            "itr": list(self.itr.notes) if self.itr is not None else [],
        }

    def notices(self) -> list[str]:
        """`warnings_by_source` in one list (energy, latency, DVFS, ITR), for the log, `GetStatus` and metrics."""
        return [line for lines in self.warnings_by_source().values() for line in lines]

    def hardware_class(self) -> HardwareClass:
        """This machine's class: /proc/cpuinfo's model, online cores, the tuned NIC's driver (sysfs link),
        the server's version (when the QPS source reads the server's own statistics: memcached's `1.6.18`, Redis's
        `redis 7.0.15`, Valkey's `valkey 8.0.1`) and the kernel release. Reads only."""
        from actuators import hwclass

        root = self.io.root
        version = hwclass.UNKNOWN
        if isinstance(self.qps, ServerStats):
            try:
                version = str(self.qps.snapshot().version or hwclass.UNKNOWN)
            except HostError:
                version = hwclass.UNKNOWN
        return HardwareClass(
            cpu_model=hwclass.cpu_model(root),
            cores=hwclass.online_cores(root),
            nic_driver=hwclass.nic_driver(root, self.itr.ifaces[0] if self.itr is not None else None),
            memcached_version=version if version != "?" else hwclass.UNKNOWN,
            kernel=hwclass.kernel_release(root),
        )

    def close(self) -> None:
        """Release sockets and the ethtool layer (does not restore: call `restore()` for that)."""
        for part in (self.latency, self.qps, self.io.nic):
            if isinstance(part, Closable):
                part.close()


def default_nic(root: Path) -> NicIoctl:
    """pyroute2's ethtool ioctl on the live kernel -- only when `root` is `/`: a fake root's interfaces
    are not the kernel's, and an ioctl would reach the real NIC of the same name."""
    if Path(root).resolve() != Path("/"):
        return UnavailableNic(
            f"NIC coalescing talks to the live kernel's ethtool ioctl and cannot be redirected "
            f"under --root {root}; use --root /"
        )
    from actuators.linux.itr import PyrouteEthtool

    return PyrouteEthtool()


def _as_tuple(value: Any) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(str(v) for v in value)


def _cores(value: Any) -> tuple[int, ...] | None:
    if value is None or value == "" or value == "all":
        return None
    if isinstance(value, str):
        try:
            return parse_cpu_list(value)
        except ValueError as exc:
            raise HostError(f"cores {value!r}: expected a CPU list like 0-3,8 ({exc})") from None
    return tuple(int(v) for v in value)


def make_real_host(
    root: str | Path = "/",
    state_dir: str | Path | None = None,
    iface: str | list[str] | None = None,
    backend: str = "auto",
    cores: str | list[int] | None = None,
    dry_run: bool = False,
    force: bool = False,
    energy: str | dict[str, Any] = "auto",
    max_power_w: float | None = None,
    energy_compare: list[dict[str, Any]] | None = None,
    qps: str | QpsSource | None = "memcached:127.0.0.1:11211",
    latency: dict[str, Any] | LatencySource | None = None,
    parts: tuple[str, ...] = ("itr", "dvfs", "energy", "qps", "latency"),
    nic: NicIoctl | None = None,
    optional: tuple[str, ...] = (),
    live_root: bool = False,
) -> RealHost:
    """Build a `RealHost` (the `real` host of `tuner.hosts.make_host`; keys match `[host.options]`).

    `iface`: interface(s) to tune (default: the only NIC bound to a driver); `backend`: DVFS backend
    (auto | cpufreq | msr | minmax | hwp); `cores`: CPU list (default all online); `energy`: auto | powercap | msr;
    `qps`: a `QpsSource` or a spec (`memcached:HOST:PORT`, `memcached:unix:/path`, `redis:HOST:PORT`,
    `redis:unix:/path` -- Redis or Valkey --, `nic:IFACE`);
    `latency`: a `LatencySource` or a table `{kind = "prober" | "prometheus" | "command" | "file", ...}`
    whose other keys go to that source (prober: `target`, `rate_hz`, ...); `parts`: which
    components to build (the manual `tuner set` builds only what it needs); `optional`: parts that may be
    missing (observe mode: energy) -- left None with the reason in `RealHost.absent`. The prober's
    `target` and `protocol` default to the server of `qps`, and its own requests are subtracted from the QPS count
    whenever both name the same server, whatever the spelling (`localhost` or `127.0.0.1`). `live_root`: `root` is this
    kernel's own /sys and /proc mounted elsewhere (a container with the host's paths under /host, where the
    runtime masks /sys/devices/virtual/powercap), so NIC coalescing goes to the live kernel's ethtool
    ioctl, as with root `/`; a fake tree (the default for root != `/`) never reaches a real NIC.

    Every part is tried: when some cannot be built, one `HostError` lists them all (`part: why; ...`), so an
    operator fixes everything in one go. Nothing is written (the first write is the first `apply`).
    """
    root = Path(root)
    if nic is None and "itr" in parts:
        nic = default_nic(Path("/") if live_root else root)
    io = HardwareIO(root, nic, dry_run)
    store = OriginalsStore(Path(state_dir) if state_dir else default_state_dir(root), root)
    host = RealHost(io, store)
    problems: list[str] = []

    def build(part: str, make: Callable[[], Any]) -> None:
        if part not in parts:
            return
        try:
            setattr(host, part, make())
        except HostError as exc:
            if part in optional:
                host.absent[part] = f"{exc} (reported as unknown)"
            else:
                problems.append(f"{part}: {exc}")

    build("itr", lambda: _make_itr(io, root, iface, force))
    build("dvfs", lambda: choose_backend(io, _cores(cores), backend))
    rapl = lambda prefer: discover_meter(io, prefer, max_power_w)
    build("energy", lambda: build_source(energy, rapl))
    host.energy_optional = "energy" in optional
    if "energy" in parts and energy_compare:
        try:
            host.compare = CompareSources(_compare_sources(energy_compare, rapl))
        except HostError as exc:
            problems.append(str(exc))
    build("qps", lambda: _make_qps(qps))
    if problems:
        raise HostPartsError(problems + _restore_dead_run(io, store))
    if "latency" in parts:
        # the prober runs on this machine, whatever `root` fakes: its client settings (governor, C-states of the
        # CPUs it runs on) are read from the live kernel's paths -- `root` only when it is them (`live_root`)
        _attach_latency(host, latency, qps, root if live_root else Path("/"))
    return host


def _compare_sources(specs: Any, rapl: Callable[[str], EnergySource]) -> list[EnergySource]:
    """`energy_compare`: a list of source tables, each built like `energy` (errors name `energy_compare[i]`)."""
    if not isinstance(specs, list):
        raise HostError("energy_compare: expected a list of tables [{kind = ...}, ...]", permanent=True)
    return [build_source(spec, rapl, f"energy_compare[{i}]") for i, spec in enumerate(specs)]


def _make_itr(io: HardwareIO, root: Path, iface: str | list[str] | None, force: bool) -> NicItr:
    ifaces = _as_tuple(iface) or physical_interfaces(root)
    if len(ifaces) > 1 and not iface:
        raise HostError(f"several NICs ({', '.join(ifaces)}): choose with --iface / host.options.iface")
    itr = NicItr(io, ifaces, force=force)
    itr.preflight()  # coalescing readable, driver verified or forced: permanent faults found now
    return itr


def _make_qps(qps: str | QpsSource | None) -> Any:
    if isinstance(qps, str):
        from actuators.qps import qps_source_from_spec

        return qps_source_from_spec(qps)
    return qps


def _attach_latency(
    host: RealHost, latency: dict[str, Any] | LatencySource | None, qps_spec: Any, probe_root: Path
) -> None:
    """Give `host` its latency source: the one given, or one built from a `[host.options.latency]` table (a prober
    reads its client settings under `probe_root`, the paths of the machine it runs on). A prober speaks the
    protocol of the server `qps_spec` names (memcached or redis) and targets it unless told otherwise; when both name
    the same server, its own requests are subtracted from the QPS count (`probe_counts_in_qps`)."""
    if latency is not None and not isinstance(latency, dict):
        host.latency = latency
        return
    opts = dict(latency or {})
    kind = opts.pop("kind", "prober")
    qps_server = server_of(qps_spec)
    if kind == "prober" and qps_server is not None:
        opts.setdefault("protocol", qps_server[0])  # speak the counted server's protocol
        if "target" not in opts and opts["protocol"] == qps_server[0]:
            opts["target"] = qps_server[1]  # probe the server whose load is counted
    source = _latency_source(kind, opts, probe_root)
    if kind == "prober" and qps_server is not None:
        from actuators.latency.prober import Prober

        host.probe_counts_in_qps = (
            isinstance(source, Prober)
            and source.config.protocol == qps_server[0]
            and same_server(parse_address(*qps_server), source.address)
        )
    host.latency = source


def _restore_dead_run(io: HardwareIO, store: OriginalsStore) -> list[str]:
    """Put back the values a dead run saved, even though this start cannot build every part: a host never keeps
    a crashed tuner's settings while its operator fixes the configuration. Returns what could not be restored."""
    if io.dry_run or not store.entries():
        return []
    try:
        report = restore_originals(io, store)
    except HostError as exc:
        return [f"settings of a previous run: {exc}"]
    for setting in report.restored:
        log.warning("restored a previous run's setting before reporting missing parts: %s", describe(setting, io.root))
    return []


def _latency_source(kind: str, opts: dict[str, Any], root: Path) -> LatencySource:
    """A latency source from `[host.options.latency]`: kind = prober | prometheus | command | file."""
    try:
        if kind == "prober":
            from actuators.latency.prober import Prober, ProberConfig

            return Prober(ProberConfig(**opts), settings_root=root)
        from actuators.latency import sources as ls

        if kind == "prometheus":
            return ls.PrometheusLatency(**opts)
        if kind == "command":
            return ls.CommandLatency(**opts)
        if kind == "file":
            return ls.FileLatency(**opts)
    except TypeError as exc:
        raise HostError(f"latency source {kind!r}: bad option ({exc})") from None
    raise HostError(f"latency source kind {kind!r}: expected prober, prometheus, command or file")
