"""tiktoken's ``o200k_base`` without a download, for machines that cannot reach it.

Inspect AI counts tokens with ``o200k_base`` (its mock model does on every call), and
tiktoken downloads that file on first use. The ``quicktok-v1`` package (installed with
baton's ``inspect`` extra) carries the same vocabulary in a binary form: a u32 count,
then per token a u16 length, the token's bytes and a u32 rank. Written out as
tiktoken's lines (``base64(token) rank``, by rank), the bytes hash to the sha256 that
tiktoken expects, so tiktoken takes the file from its cache and never goes online.
Where quicktok is missing, nothing is done and tiktoken downloads as usual.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import tempfile
from importlib import resources
from pathlib import Path

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def tiktoken_cache_dir() -> Path | None:
    """Where tiktoken looks for a cached file (None: the user turned caching off)."""
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in os.environ:
            return Path(os.environ[name]) if os.environ[name] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def provide_o200k() -> Path | None:
    """Put o200k_base in tiktoken's cache if it is not there; its path, or None when it
    could not be provided (no quicktok, caching off, a vocabulary that does not match)."""
    cache = tiktoken_cache_dir()
    if cache is None:
        return None
    target = cache / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256:
        return target
    try:
        vocab = resources.files("quicktok").joinpath("data/o200k.vocab").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None
    text = tiktoken_lines(vocab)
    if hashlib.sha256(text).hexdigest() != O200K_SHA256:
        return None  # a different vocabulary: let tiktoken fetch the real one
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(text)
    os.replace(tmp, target)
    return target


def tiktoken_lines(vocab: bytes) -> bytes:
    """quicktok's binary vocabulary as tiktoken's text format."""
    ranked: list[tuple[int, bytes]] = []
    offset = 4  # the u32 count; the entries themselves say where the data ends
    while offset < len(vocab):
        (length,) = struct.unpack_from("<H", vocab, offset)
        token = vocab[offset + 2: offset + 2 + length]
        (rank,) = struct.unpack_from("<I", vocab, offset + 2 + length)
        ranked.append((rank, token))
        offset += 2 + length + 4
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in sorted(ranked))
