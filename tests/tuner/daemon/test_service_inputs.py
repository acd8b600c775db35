"""Every RPC of `tuner.v1.Tuner` over a real channel to one running daemon, with hostile inputs drawn by
hypothesis (`tests/rpckit.py`): each call gets a status code a bad request may get (never UNKNOWN / INTERNAL),
within its deadline, with no NaN or infinity in the answer, and leaves the policy as it was -- except an
accepted `SetPolicy`, which sets exactly what it asked for (and is undone before the next example)."""

from __future__ import annotations

import logging

import grpc
import pytest
from hypothesis import HealthCheck, given, settings

from tests.daemon_fakes import Running, wait_for, write_config
from tests.rpckit import (
    DEADLINE_S,
    FIELDS,
    RPCS,
    call,
    non_finite,
    outcome_problems,
    policy_asked,
    policy_of,
    request,
    same_policy,
)
from tests.store_fakes import entry
from tuner.daemon.service import protos
from tuner.store.sqlite import SqliteStore

#: examples per RPC: the whole module runs in seconds (bench/fuzz.py --targets rpc draws 10,000 per RPC)
EXAMPLES = 80


class _Tracebacks(logging.Handler):
    """Every log record of the daemon's process that carries an exception (a handler that crashed)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(f"{record.name}: {record.getMessage()} ({record.exc_info[1]!r})")


@pytest.fixture(scope="module")
def tracebacks():
    handler = _Tracebacks()
    logging.getLogger().addHandler(handler)
    yield handler.records
    logging.getLogger().removeHandler(handler)


@pytest.fixture(scope="module")
def running(tmp_path_factory, tracebacks):
    tmp = tmp_path_factory.mktemp("rpc-inputs")
    cfg = write_config(tmp, sla_us=900.0, window_s=0.05)
    store = SqliteStore(tmp / "state" / "trials.sqlite")  # trials in the store, so GetFleetView bands them
    store.add([entry(i, qps=q, itr=itr) for i, (q, itr) in enumerate([(1.0, 50), (200e3, 64), (1e9, 100)], 1)])
    store.close()
    with Running(cfg) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        yield r


@pytest.fixture(scope="module")
def stub(running):
    pb, services = protos()
    with grpc.insecure_channel(running.daemon.grpc_address) as ch:
        yield pb, services.TunerStub(ch)


def _policy(pb, stub) -> tuple[float, float, str]:
    return policy_of(stub.GetStatus(pb.GetStatusRequest(), timeout=DEADLINE_S))


def _check(pb, stub, rpc: str, fields: dict, tracebacks: list[str]) -> None:
    before = _policy(pb, stub)
    code, resp, took, details = call(stub, rpc, request(pb, rpc, fields))
    assert not outcome_problems(rpc, code, details, took), (rpc, fields, outcome_problems(rpc, code, details, took))
    if resp is not None:
        assert not non_finite(resp), (rpc, fields, non_finite(resp))
    assert not tracebacks, (rpc, fields, tracebacks)
    after = _policy(pb, stub)
    if rpc != "SetPolicy" or code != grpc.StatusCode.OK:
        assert after == before, (rpc, fields)
        return
    assert same_policy(after, policy_asked(before, fields)), (fields, before, after)
    assert policy_of(pb.Status(policy=resp)) == after  # the answer is the policy now in force
    restore = pb.SetPolicyRequest(sla_us=before[0], percentile=before[1], reward=before[2])
    stub.SetPolicy(restore, timeout=DEADLINE_S)
    assert _policy(pb, stub) == before


@pytest.mark.parametrize("rpc", RPCS)
def test_hostile_requests_get_a_status_code_in_bounded_time_and_leave_the_policy(stub, tracebacks, rpc):
    pb, tuner = stub

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(fields=FIELDS[rpc])
    def one(fields: dict) -> None:
        _check(pb, tuner, rpc, fields, tracebacks)

    one()


def test_the_inputs_that_crashed_are_refused(stub):
    """Regression inputs: a band width whose ratio rounds to 1 (the band index divided by zero); a 100 kB
    reward echoed in the refusal (the client dropped it: RESOURCE_EXHAUSTED); a retune reason that forged a
    log line."""
    pb, tuner = stub
    code, _, _, details = call(tuner, "SetPolicy", pb.SetPolicyRequest(reward="x" * 100_000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("reward: expected at most 200")
    code, _, _, details = call(tuner, "Retune", pb.RetuneRequest(reason="ok\nERROR forged"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "control" in details
    code, _, _, details = call(tuner, "ListTrials", pb.ListTrialsRequest(retune_id="r" * 201))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "retune_id" in details
    for band in (1e-300, 1e-15):
        code, _, _, details = call(tuner, "GetFleetView", pb.GetFleetViewRequest(band_pct=band))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "band_pct" in details
