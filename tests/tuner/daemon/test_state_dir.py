"""Opening the state directory (`StateStore.ensure`): what the OS would refuse is found first without writing
(`unusable_dir`, which `tuner daemon --check` runs too) and raised as `StateDirError`; a directory another daemon
holds is a plain `TunerError` (it may pass: systemd restarts on it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import TunerError
from tuner.daemon.state import DIR_MAX, StateDirError, StateStore, unusable_dir


def test_a_usable_directory_existing_or_to_be_made_has_no_problem_and_checking_makes_nothing(tmp_path):
    assert unusable_dir(tmp_path) is None
    assert unusable_dir(tmp_path / "a" / "b" / "c") is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a" * 5000, "File name too long"),
        ("/".join(["d" * 100] * 42), "File name too long"),
        ("x" * 256, "a name over 255 bytes"),
        ("file", "Not a directory"),
        ("file/sub", "Not a directory"),
        ("nul\0byte", "embedded null byte"),
    ],
)
def test_what_the_os_would_refuse_is_found_without_writing(tmp_path, name, why):
    (tmp_path / "file").write_text("x")
    reason = unusable_dir(tmp_path / name)
    assert reason is not None and why in reason
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_directory_just_short_enough_for_the_trial_stores_files_is_usable_and_one_byte_more_is_not(tmp_path):
    room = DIR_MAX - len(str(tmp_path)) - 1
    deep = tmp_path.joinpath(*["d" * 99] * (room // 100), "e" * (room % 100 or 1))
    assert len(str(deep)) == DIR_MAX and unusable_dir(deep) is None
    assert "File name too long" in (unusable_dir(Path(f"{deep}f")) or "")
    StateStore(deep).ensure()  # and really usable: made, written, locked
    from tuner.store.sqlite import SqliteStore

    SqliteStore(deep / "trials-spool.sqlite").close()  # the longest name of a file the store keeps there


def test_ensure_raises_state_dir_error_shortened_and_in_use_stays_a_plain_error(tmp_path):
    with pytest.raises(StateDirError) as e:
        StateStore(tmp_path / ("a" * 5000)).ensure()
    assert "File name too long" in e.value.reason and len(str(e.value)) < 300
    with pytest.raises(StateDirError, match="Not a directory"):
        StateStore(Path("/dev/null")).ensure()
    first = StateStore(tmp_path / "st")
    first.ensure()
    with pytest.raises(TunerError, match="in use by another tuner daemon") as e:
        StateStore(tmp_path / "st").ensure()
    assert not isinstance(e.value, StateDirError)
    first.release()
