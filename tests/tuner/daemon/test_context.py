"""`LoopContext` alone: applying a point, the run-time policy, and the decision feed."""

from __future__ import annotations

import json

import pytest

from actuators.host import OperatingPoint
from core.errors import InputError
from tests.daemon_fakes import loop_context
from tests.fakes import FakeHost
from tuner.daemon.context import DecisionFeed


def test_apply_persists_the_dirty_flag_before_the_first_write_then_notes_the_point(tmp_path):
    seen: list[bool] = []

    class Spy(FakeHost):
        def set_itr(self, itr_us: int) -> None:
            seen.append(json.loads((tmp_path / "state" / "state.json").read_text())["knobs_dirty"])
            super().set_itr(itr_us)

    ctx = loop_context(tmp_path, Spy())
    hooks: list[OperatingPoint | None] = []
    ctx.on_apply.append(lambda: hooks.append(ctx.current_point))
    point = ctx.apply(OperatingPoint(ctx.knob_space.itr_us[0], ctx.knob_space.dvfs_ghz[-1]))
    assert seen == [True]  # on disk before the host was touched
    assert ctx.current_point == point == ctx.live_host.point() and hooks == [point]
    assert ctx.metrics.registry.get_sample_value("tuner_itr_seconds") == pytest.approx(point.itr_us * 1e-6)
    ctx.store.release()


def test_set_policy_validates_and_asks_for_a_retune_only_when_it_changed(tmp_path):
    ctx = loop_context(tmp_path)
    with pytest.raises(InputError, match="sla_us"):
        ctx.set_policy(-1.0, None, None)
    assert ctx.requests.retune is None
    same = ctx.set_policy(None, None, None)
    assert same == ctx.config.policy and not ctx.requests.restart_retune
    new = ctx.set_policy(250.0, None, None)
    assert new.sla_us == 250.0 and ctx.policy() == new
    assert (ctx.requests.retune, ctx.requests.restart_retune, ctx.wake.is_set()) == ("policy", True, True)
    assert ctx.store.load().policy_override == dict(new.__dict__)  # saved
    ctx.store.release()


def test_the_decision_feed_drops_for_a_full_subscriber_and_never_blocks():
    feed = DecisionFeed()
    q = feed.subscribe()
    for i in range(300):  # more than the queue holds
        feed.publish({"i": i})
    assert q.qsize() == 256 and q.get_nowait() == {"i": 0}
    feed.unsubscribe(q)
    feed.publish({"i": -1})
    assert len(feed) == 0 and q.qsize() == 255
