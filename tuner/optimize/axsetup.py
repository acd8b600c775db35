"""Ax plumbing shared by the optimiser's layers: Ax's logging and numerical warnings kept off the terminal,
torch's and BLAS's thread counts while it fits, and the acquisition's candidate batch size."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_QUIETED = False
_BLAS: list[Any] = []  # the threadpoolctl controller, made once (it scans the loaded libraries: ~2 ms)


def quiet_ax() -> None:
    """Keep Ax's INFO logging off the terminal (its stream handler is process-wide; done once)."""
    global _QUIETED
    if _QUIETED:
        return
    import logging

    from ax.utils.common.logger import set_ax_logger_levels, set_stderr_log_level

    set_stderr_log_level(logging.ERROR)
    set_ax_logger_levels(logging.ERROR)
    _QUIETED = True


def _blas_limit(threads: int) -> Any:
    """A context that runs the BLAS libraries loaded so far (OpenBLAS under numpy and scipy) on `threads` threads."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=threads, user_api="blas")


@contextmanager
def no_warnings(threads: int | None = None) -> Iterator[None]:
    """Silence numerical/input warnings from GPyTorch/BoTorch/Ax while they fit and optimise; with `threads`,
    run torch on that many intra-op threads meanwhile, and BLAS too (restored after): scipy's L-BFGS, which
    fits the GP's hyperparameters, calls OpenBLAS for vectors of a few entries, and OpenBLAS's idle threads
    spin -- on 2 busy cores a warm-started fit cost 2.3 x the CPU with BLAS's default 2 threads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if threads is None:
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with _blas_limit(threads):
                yield
        finally:
            torch.set_num_threads(before)


#: Candidates per batch when Ax enumerates the (ITR x DVFS) grid to maximise the acquisition. BoTorch's
#: default (2048, halved per model output) broadcasts the training covariance over the whole batch; batches of
#: 64 stay in cache and cut the acquisition time ~2x (150 trials in the model: 2.0 s -> 0.8 s on this box,
#: bench/suggest.py) -- every candidate is still evaluated, so the proposal is the same.
ACQF_BATCH = 64


def small_acqf_batches(client: Any) -> None:
    """Set `ACQF_BATCH` on the model-based node of the client's generation strategy."""
    for node in client._generation_strategy._nodes:
        for spec in node.generator_specs:
            if spec.generator_enum.value == "BoTorch":
                opts = dict(spec.generator_gen_kwargs.get("model_gen_options") or {})
                opts["optimizer_kwargs"] = {**opts.get("optimizer_kwargs", {}), "max_batch_size": ACQF_BATCH}
                spec.generator_gen_kwargs = {**spec.generator_gen_kwargs, "model_gen_options": opts}
