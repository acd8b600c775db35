"""A restarted daemon puts its held point back and says where it comes from (a retune, or a hold)."""

from __future__ import annotations

import logging

from tests.daemon_fakes import Running, read_state, wait_for, write_config


def test_a_restart_after_an_idle_hold_says_it_resumes_the_idle_hold(tmp_path, caplog):
    options = {"knob_file": str(tmp_path / "knobs.json"), "qps": 10.0}  # below idle_qps: the idle point is held
    cfg = write_config(tmp_path, options=options)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: (read_state(tmp_path).get("held") or {}).get("reason") == "idle")
        assert r.stop() == 0
    assert read_state(tmp_path)["held"]["retune_id"] == ""
    with caplog.at_level(logging.INFO, logger="tuner.daemon.loop"), Running(cfg, serve=False) as r:
        wait_for(lambda: any(m.startswith("holding ") for m in caplog.messages))
        assert r.stop() == 0
    line = next(m for m in caplog.messages if m.startswith("holding "))
    assert line.endswith(" from the idle hold"), line
