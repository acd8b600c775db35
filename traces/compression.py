"""Open a trace file as a stream of decompressed byte chunks: zstd, gzip or plain, detected by magic bytes.

Truncated or corrupt compressed input raises `InputError` with one line naming the file; memory stays bounded by
the chunk size (times the compression ratio of one compressed chunk).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from core.errors import InputError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
_SUFFIX = {".zst": "zstd", ".zstd": "zstd", ".gz": "gzip"}


def _is_zstd_skippable(head: bytes) -> bool:
    return len(head) == 4 and head[1:] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50


def detect(path: str | os.PathLike[str]) -> str:
    """'zstd', 'gzip' or 'plain' from the first bytes; a .zst/.gz suffix on other content is an `InputError`."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise InputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    if head.startswith(ZSTD_MAGIC) or _is_zstd_skippable(head):
        kind = "zstd"
    elif head.startswith(GZIP_MAGIC):
        kind = "gzip"
    else:
        kind = "plain"
    claimed = _SUFFIX.get(Path(path).suffix.lower())
    if claimed and kind != claimed and head:
        raise InputError(
            f"{path}: name says {claimed} but the file does not start with {claimed} magic bytes "
            f"(got {head.hex(' ')}); expected a {claimed}-compressed trace"
        )
    return kind


def _plain(fh: BinaryIO, size: int) -> Iterator[bytes]:
    while chunk := fh.read(size):
        yield chunk


def _gzip(path: str | os.PathLike[str], fh: BinaryIO, size: int) -> Iterator[bytes]:
    try:
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            while chunk := gz.read(size):
                yield chunk
    except EOFError:
        raise InputError(f"{path}: truncated gzip data (compressed stream ended early)") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise InputError(f"{path}: corrupt gzip data ({exc})") from None


def _zstd(path: str | os.PathLike[str], fh: BinaryIO, size: int) -> Iterator[bytes]:
    import zstandard

    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    obj, fed = dctx.decompressobj(), False
    try:
        while raw := fh.read(size):
            while raw:
                out = obj.decompress(raw)
                fed = True
                if out:
                    yield out
                if obj.eof:  # frame done: the rest of `raw` belongs to the next frame
                    raw = obj.unused_data
                    obj, fed = dctx.decompressobj(), False
                else:
                    raw = b""
    except zstandard.ZstdError as exc:
        raise InputError(f"{path}: corrupt zstd data ({exc})") from None
    if fed and not obj.eof:
        raise InputError(f"{path}: truncated zstd data (compressed stream ended inside a frame)")


def open_chunks(path: str | os.PathLike[str], chunk_bytes: int = 1 << 22) -> Iterator[bytes]:
    """Yield the decompressed content of `path` in chunks (compressed reads of at most `chunk_bytes`)."""
    kind = detect(path)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    with fh:
        if kind == "plain":
            yield from _plain(fh, chunk_bytes)
        elif kind == "gzip":
            yield from _gzip(path, fh, chunk_bytes)
        else:
            yield from _zstd(path, fh, max(chunk_bytes // 8, 1 << 16))
