"""Tiny, valid media payloads for the content-type fixtures."""

from __future__ import annotations

import base64
import struct
import zlib


def png_1x1() -> str:
    """A 1x1 red PNG, base64."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def wav_silence(samples: int = 800, rate: int = 8000) -> str:
    """A tenth of a second of 8-bit mono silence as a WAV file, base64."""
    data = b"\x80" * samples
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE"
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate, 1, 8)
    return base64.b64encode(header + fmt + b"data" + struct.pack("<I", len(data)) + data).decode()
