"""The gRPC API of a daemon running in process: health, reflection-only client for every RPC, errors, auth."""

from __future__ import annotations

import itertools
import math
import threading

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.daemon_fakes import Running, wait_for, write_config


class ReflectionClient:
    """Calls `tuner.v1.Tuner` knowing nothing but what server reflection tells it (no generated code)."""

    def __init__(self, channel: grpc.Channel, metadata: list | None = None) -> None:
        self.channel = channel
        self.metadata = metadata or []
        db = ProtoReflectionDescriptorDatabase(channel)
        assert "tuner.v1.Tuner" in db.get_services()
        self.pool = descriptor_pool.DescriptorPool(db)
        self.service = self.pool.FindServiceByName("tuner.v1.Tuner")

    def _classes(self, method: str):
        m = self.service.methods_by_name[method]
        return m, message_factory.GetMessageClass(m.input_type), message_factory.GetMessageClass(m.output_type)

    def call(self, method: str, **fields):
        m, req_cls, resp_cls = self._classes(method)
        req = json_format.ParseDict(fields, req_cls())
        path = f"/tuner.v1.Tuner/{method}"
        if m.server_streaming:
            return self.channel.unary_stream(
                path, request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString
            )(req, metadata=self.metadata)
        return self.channel.unary_unary(
            path, request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString
        )(req, timeout=5, metadata=self.metadata)


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grpc")
    cfg = write_config(tmp, sla_us=900.0, window_s=0.05)
    r = Running(cfg)
    wait_for(lambda: r.daemon.status().state == "holding")
    yield r
    r.stop()


@pytest.fixture(scope="module")
def client(running):
    ch = grpc.insecure_channel(running.daemon.grpc_address)
    yield ReflectionClient(ch)
    ch.close()


def test_health_serving(running):
    with grpc.insecure_channel(running.daemon.grpc_address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for name in ("", "tuner.v1.Tuner"):
            r = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.SERVING


def test_get_status(client, running):
    s = client.call("GetStatus")
    assert s.state == "holding"
    assert (s.point.itr_us, round(s.point.dvfs_ghz, 3)) == (running.host.point().itr_us, running.host.point().dvfs_ghz)
    assert s.offered_qps == pytest.approx(100_000.0) and s.policy.sla_us == 900.0 and s.policy.percentile == 99.0
    assert s.retune_trials_planned == 4 and s.trials_total >= 4 and s.tuned_qps == 100_000.0
    assert s.last_measurement.latency_us["99"] > 0 and s.last_measurement.power_w > 0


def test_get_operating_point_from_measured_trials(client, running):
    r = client.call("GetOperatingPoint", qps=100_000.0)
    assert r.from_measured and r.meets_sla
    assert 0 < r.predicted_latency_us <= 900.0 and r.predicted_power_w > 0
    # it is a point that was measured meeting the SLA at this load
    lat, _, _ = running.host.model(r.point.itr_us, r.point.dvfs_ghz, 100_000.0)
    assert lat[99.0] <= 900.0
    # an SLA nothing meets -> safe corner, flagged
    r = client.call("GetOperatingPoint", qps=100_000.0, sla_us=1.0, percentile=50.0)
    assert not r.meets_sla and not r.from_measured and "safe corner" in r.note
    space = running.daemon.space
    assert (r.point.itr_us, r.point.dvfs_ghz) == (space.itr_us[0], space.dvfs_ghz[-1])


def test_get_operating_point_from_model_when_nothing_measured_meets(client, running):
    # requests at the tuned load but with an SLA between the model's bound and the measured values
    trials = running.daemon.trials()
    lats = sorted(t["measurement"]["latency_us"]["99"] for t in trials if t["measurement"])
    r = client.call("GetOperatingPoint", qps=100_000.0, sla_us=lats[0] * 0.9)
    # nothing measured meets 0.9x the best trial; the (fake, optimistic) model predicts points that do
    assert not r.from_measured and r.meets_sla and r.source.startswith("model of retune")
    assert r.predicted_latency_us + 1.645 * r.latency_sem_us <= lats[0] * 0.9 and r.latency_sem_us > 0
    assert r.predicted_power_w > 0 and r.power_sem_w == 1.0
    # the model answers only for the percentile it was trained on
    r = client.call("GetOperatingPoint", qps=100_000.0, sla_us=lats[0] * 0.9, percentile=99.9)
    assert not r.meets_sla and "predicts p99 only" in r.note


def test_get_power_curve_from_the_model(client, running):
    c = client.call("GetPowerCurve")  # the policy's SLA and percentile
    assert (c.sla_us, c.percentile) == (900.0, 99.0) and len(c.points) >= 1
    p = c.points[0]
    assert p.qps == pytest.approx(100_000.0) and p.meets_sla and p.source.startswith("model ")
    assert p.predicted_latency_us + 1.645 * p.latency_sem_us <= 900.0 and p.latency_sem_us > 0
    assert p.predicted_power_w > 0 and p.power_sem_w == 1.0
    # a tighter SLA costs at least as much power; an impossible one is reported, not dropped
    tight = client.call("GetPowerCurve", sla_us=p.predicted_latency_us * 0.8).points[0]
    assert not tight.meets_sla or tight.predicted_power_w >= p.predicted_power_w
    none = client.call("GetPowerCurve", sla_us=1.0).points[0]
    assert not none.meets_sla and not none.HasField("point")
    other = client.call("GetPowerCurve", percentile=90.0)
    assert list(other.points) == [] and "other percentiles left out (p99)" in other.note
    with pytest.raises(grpc.RpcError) as err:
        client.call("GetPowerCurve", percentile=97.0)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "fields, word",
    [
        ({"qps": 0.0}, "qps"),
        ({"qps": -5.0}, "qps"),
        ({"qps": "NaN"}, "qps"),
        ({"qps": "Infinity"}, "qps"),
        ({"qps": 1e5, "percentile": 42.0}, "percentile"),
        ({"qps": 1e5, "sla_us": -1.0}, "sla_us"),
        ({"qps": 1e5, "sla_us": "NaN"}, "sla_us"),
    ],
)
def test_get_operating_point_invalid_argument(client, fields, word):
    with pytest.raises(grpc.RpcError) as e:
        client.call("GetOperatingPoint", **fields)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and word in e.value.details()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    qps=st.floats(allow_nan=True, allow_infinity=True),
    sla=st.floats(allow_nan=True, allow_infinity=True),
    pct=st.one_of(st.sampled_from([0.0, 50.0, 99.0, 99.9]), st.floats(allow_nan=True, allow_infinity=True)),
)
def test_fuzz_get_operating_point_never_crashes(client, qps, sla, pct):
    m, req_cls, resp_cls = client._classes("GetOperatingPoint")
    req = req_cls(qps=qps, sla_us=sla, percentile=pct)
    call = client.channel.unary_unary(
        "/tuner.v1.Tuner/GetOperatingPoint",
        request_serializer=req_cls.SerializeToString,
        response_deserializer=resp_cls.FromString,
    )
    try:
        r = call(req, timeout=5)
        assert math.isfinite(r.predicted_latency_us) and r.point.dvfs_ghz > 0
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())


def test_list_trials(client, running):
    r = client.call("ListTrials")
    assert len(r.trials) == len(running.daemon.trials()) >= 4
    t = r.trials[0]
    assert t.status == "completed" and t.has_reward and t.measurement.latency_us["99"] > 0
    assert len(client.call("ListTrials", limit=2).trials) == 2
    assert client.call("ListTrials", retuneId="nope").trials == []


def test_set_policy_validation_and_watch_decisions(client, running):
    with pytest.raises(grpc.RpcError) as e:
        client.call("SetPolicy", percentile=42.0)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "percentile" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        client.call("SetPolicy", reward="money")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    stream = client.call("WatchDecisions")
    first = next(stream)  # the latest decision is sent first
    assert first.reason == "startup" and first.point.itr_us > 0
    got: list = []
    t = threading.Thread(target=lambda: got.extend(itertools.islice(stream, 1)), daemon=True)
    t.start()
    p = client.call("SetPolicy", slaUs=950.0)
    assert (p.sla_us, p.percentile, p.reward) == (950.0, 99.0, running.daemon.policy().reward)
    t.join(10)
    stream.cancel()
    assert got and got[0].reason == "policy"
    wait_for(lambda: running.daemon.status().state == "holding")


def test_retune_rpc(client, running):
    wait_for(lambda: running.daemon.status().state == "holding")
    n = len(running.daemon.state.decisions)
    r = client.call("Retune", reason="test")
    assert r.accepted
    wait_for(lambda: any(d["reason"] == "rpc" for d in running.daemon.state.decisions[n:]), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        client.call("Retune", reason="x" * 500)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bearer_token_required_when_configured(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    cfg = (
        write_config(tmp_path, sla_us=900.0, listen="127.0.0.1:0", metrics="off", extra="")
        .read_text()
        .replace("[grpc]\n", f'[grpc]\ntoken_file = "{token}"\n')
    )
    (tmp_path / "tuner.toml").write_text(cfg)
    with Running(tmp_path / "tuner.toml") as r:
        addr = r.daemon.grpc_address
        assert addr.startswith("127.0.0.1:") and not addr.endswith(":0")
        with grpc.insecure_channel(addr) as ch:
            # health (probes) and reflection (public schema) stay open; the API needs the token
            assert (
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            )
            good = ReflectionClient(ch, metadata=[("authorization", "Bearer s3cret-token")])
            assert good.call("GetStatus").version
            right, wrong = ("authorization", "Bearer s3cret-token"), ("authorization", "Bearer wrong")
            for md in (
                [],
                [wrong],
                [("authorization", "s3cret-token")],
                [wrong, right],
                [right, wrong],
                [right, right],
            ):
                bad = ReflectionClient.__new__(ReflectionClient)
                bad.__dict__.update(good.__dict__, metadata=md)
                with pytest.raises(grpc.RpcError) as e:
                    bad.call("GetStatus")
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
                with pytest.raises(grpc.RpcError) as e:
                    next(bad.call("WatchDecisions"))
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _openssl(*args, cwd):
    import subprocess

    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_certificates(d):
    """A throwaway CA in `d` (ca.pem, ca.key) and server and client certificates it signed (NAME.pem, NAME.key)."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=tuner-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=d,
    )
    for name, ext in (
        ("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        _openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.pem",
            cwd=d,
        )


@pytest.mark.skipif(__import__("shutil").which("openssl") is None, reason="openssl not installed")
def test_tls_with_client_certificates(tmp_path):
    d = tmp_path
    _make_certificates(d)
    text = (
        write_config(d, sla_us=900.0, listen="0.0.0.0:0", metrics="off")
        .read_text()
        .replace("[grpc]\n", '[grpc]\ntls_cert = "server.pem"\ntls_key = "server.key"\ntls_client_ca = "ca.pem"\n')
    )
    (d / "tuner.toml").write_text(text)
    with Running(d / "tuner.toml") as r:
        port = r.daemon.grpc_address.rpartition(":")[2]
        opts = [("grpc.ssl_target_name_override", "localhost")]
        ca = (d / "ca.pem").read_bytes()
        good = grpc.ssl_channel_credentials(ca, (d / "client.key").read_bytes(), (d / "client.pem").read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{port}", good, options=opts) as ch:
            assert ReflectionClient(ch).call("GetStatus").version == "0.1.0"
        with grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(ca), options=opts) as ch:
            with pytest.raises(grpc.RpcError) as e:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # handshake refused without a client cert
        import subprocess
        import sys

        ctl = [
            sys.executable,
            "-m",
            "tuner.cli",
            "ctl",
            "--address",
            f"127.0.0.1:{port}",
            "--tls-ca",
            str(d / "ca.pem"),
        ]
        ok = subprocess.run(
            ctl + ["--tls-cert", str(d / "client.pem"), "--tls-key", str(d / "client.key"), "status"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ok.returncode == 0 and ok.stdout.startswith("state: "), ok.stderr
        bad = subprocess.run(ctl + ["--timeout", "2", "status"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "UNAVAILABLE" in bad.stderr
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)


def test_cancelled_watch_streams_give_their_place_back(client, running):
    """A client that opens and cancels streams one after another is not refused for streams it already closed
    (they used to hold their place until the next 0.25 s poll: 16 of 24 were RESOURCE_EXHAUSTED)."""
    from tuner.daemon.service import MAX_WATCHERS

    refused = 0
    for _ in range(3 * MAX_WATCHERS):
        stream = client.call("WatchDecisions")
        try:
            assert next(stream).retune_id
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.code()
            refused += 1
        finally:
            stream.cancel()
    assert refused <= MAX_WATCHERS // 2
