"""Reading a trace file piece by piece, decompressing it on the way (gzip, xz, zstd: recognised by their magic bytes).

The streaming readers (tracefs text, Perfetto protobuf) hold one piece at a time, never the whole file, so that a
10-million-event trace reads in constant memory besides its events. `head` gives the first bytes, to recognise the
format without decompressing the rest.
"""

from __future__ import annotations

import gzip
import lzma
import zlib
from collections.abc import Iterator
from pathlib import Path

from smartio.errors import UsageError

# Magic bytes of the compressed files we read, and how to open each.
COMPRESSED = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
PIECE = 8 << 20   # bytes handed to a reader at a time


class TraceFormatError(UsageError):
    """The trace file is malformed; exit code 2. The message gives the file and the byte offset."""

    def __init__(self, path: Path | str, offset: int, why: str) -> None:
        self.offset = offset
        super().__init__(None, path, f"bad trace at byte offset {offset}: {why}")


def compression(path: Path) -> str | None:
    with open(path, "rb") as f:
        start = f.read(8)
    return next((k for magic, k in COMPRESSED.items() if start.startswith(magic)), None)


def pieces(path: Path, size: int | None = None) -> Iterator[bytes]:
    """The file's bytes, decompressed, in pieces of about `size` bytes (default PIECE; offsets in errors are then
    offsets in the decompressed data)."""
    size = size or PIECE
    kind = compression(path)
    if kind is None:
        with open(path, "rb") as f:
            while chunk := f.read(size):
                yield chunk
        return
    try:
        if kind == "zstd":
            yield from _zstd_pieces(path, size)
            return
        with (gzip.open(path, "rb") if kind == "gzip" else lzma.open(path, "rb")) as f:
            while chunk := f.read(size):
                yield chunk
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as e:
        raise TraceFormatError(path, 0, f"{path.name} is {kind}-compressed but cannot be decompressed: {e}") from None
    except Exception as e:   # zstandard.ZstdError
        if type(e).__name__ != "ZstdError":
            raise
        raise TraceFormatError(path, 0, f"{path.name} is zstd-compressed but cannot be decompressed: {e}") from None


def _zstd_pieces(path: Path, size: int) -> Iterator[bytes]:
    import zstandard

    with open(path, "rb") as f:
        z = zstandard.ZstdDecompressor().decompressobj()
        while chunk := f.read(size // 8):
            out = z.decompress(chunk)
            if out:
                yield out
        if not z.eof:
            raise EOFError("the compressed data end before the end of the frame (truncated?)")


def head(path: Path, n: int = 4096) -> bytes:
    """The first n bytes of the file, decompressed."""
    out = bytearray()
    for piece in pieces(path, max(n, 1 << 16)):
        out += piece
        if len(out) >= n:
            break
    return bytes(out[:n])


def inflate(blob: bytes) -> bytes:
    """A deflate stream, with a zlib or gzip header or none (Perfetto's compressed_packets)."""
    try:
        return zlib.decompress(blob, 47)   # zlib or gzip header, recognised
    except zlib.error:
        return zlib.decompress(blob, -15)  # raw deflate
