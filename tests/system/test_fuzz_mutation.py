"""Mutation fuzz of the config loader and the trace parser, end to end through the CLI: a mutated valid input
is accepted or refused with one line per problem naming the file -- never a traceback. A larger run:
`bench/fuzz.py`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from core.errors import EXIT_CONFIG
from tests.fuzzkit import MUTATIONS, check_config, check_trace, config_base, mutate, trace_base

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = config_base()
TRACE = trace_base()


def test_the_bases_are_valid():
    with tempfile.TemporaryDirectory() as tmp:
        assert check_config(Path(tmp), CONFIG) == (0, [])
        assert check_trace(Path(tmp), TRACE, skip_bad=False) == (0, [])


def test_hostile_values_are_errors_at_their_line():
    with tempfile.TemporaryDirectory() as tmp:
        # a tls_cert the OS cannot take (too long) is one line at the key, not an OSError traceback
        data = CONFIG.replace(b"[grpc]", b'[grpc]\ntls_cert = "' + b"a" * 3000 + b'"\ntls_key = "k"', 1)
        code, bad = check_config(Path(tmp), data)
        assert code == EXIT_CONFIG and not bad
        data = CONFIG.replace(b"[grpc]", b'[grpc]\ntoken_file = "a\\u0000b"', 1)
        assert check_config(Path(tmp), data)[0] == EXIT_CONFIG


@FUZZ
@given(mutations=MUTATIONS)
def test_config_loader_mutations(mutations):
    with tempfile.TemporaryDirectory() as tmp:
        code, bad = check_config(Path(tmp), mutate(CONFIG, mutations))
    assert not bad, bad


@FUZZ
@given(mutations=MUTATIONS)
def test_trace_parser_mutations(mutations):
    data = mutate(TRACE, mutations)
    with tempfile.TemporaryDirectory() as tmp:
        for skip_bad in (False, True):
            code, bad = check_trace(Path(tmp), data, skip_bad=skip_bad)
            assert not bad, (skip_bad, bad)
