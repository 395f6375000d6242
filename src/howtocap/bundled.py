"""Models that ship inside PyPI packages: find their files and assemble split ones, once.
Several packages carry one model in parts (a GGUF in six wheels, a Whisper ``model.bin`` in two);
they are concatenated into the user's cache and verified by size and SHA-256 before use. A model
file's hash (its identity in a stage's fingerprint) is computed once and kept in that cache."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from howtocap.errors import HowtocapError


def cache_root() -> Path:
    """``$HOWTOCAP_CACHE``, else ``$XDG_CACHE_HOME/howtocap``, else ``~/.cache/howtocap``."""
    if env := os.environ.get("HOWTOCAP_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "howtocap"


def package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it (some break on import)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def concat_parts(parts: list[Path], dest: Path, *, size: int, sha256: str) -> Path:
    """Concatenate ``parts`` into ``dest`` (atomically), check size and hash; reuse a verified
    copy. A ``<dest>.sha256`` marker records the verification so later runs skip rehashing."""
    marker = dest.with_name(dest.name + ".sha256")
    if (dest.is_file() and dest.stat().st_size == size and marker.is_file()
            and marker.read_text().strip() == sha256):
        return dest
    total = sum(p.stat().st_size for p in parts)
    if total != size:
        raise HowtocapError(f"{dest.name}: the package parts hold {total} bytes, expected "
                            f"{size}; reinstall the model packages")
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while chunk := src.read(8 << 20):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise HowtocapError(f"{dest.name}: the assembled file has the wrong SHA-256; "
                                "reinstall the model packages")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    from howtocap.atomic import atomic_write_text

    atomic_write_text(marker, sha256 + "\n")  # written last: it vouches for the file
    return dest


_lock = threading.Lock()
_memo: dict[str, str] = {}


def file_hash(path: str | os.PathLike[str]) -> str:
    """blake2b of a file's bytes, once per (path, size, mtime), remembered in the user cache's
    hashes.json (a 1 GB GGUF is not re-hashed each run)."""
    from howtocap.atomic import JsonFolder

    p = Path(path).resolve()
    st = p.stat()
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    with _lock:
        if key in _memo:
            return _memo[key]
        cache = JsonFolder(cache_root())
        digest = (cache.read("hashes") or {}).get(key)
        if digest is None:
            h = hashlib.blake2b(digest_size=16)
            with p.open("rb") as fh:
                while chunk := fh.read(8 << 20):
                    h.update(chunk)
            digest = h.hexdigest()
            with contextlib.suppress(OSError):  # a read-only cache only costs a re-hash later
                cache.write("hashes", {**(cache.read("hashes") or {}), key: digest})
        _memo[key] = digest
        return digest


def files_hash(paths: Iterable[Path]) -> str:
    """One hash over several files (a model folder's weights)."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(file_hash(p).encode())
    return h.hexdigest()
