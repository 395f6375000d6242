"""The download step's typed settings. Only what changes the fetched files is fingerprinted
(format, height, audio, size limit, subtitle languages): workers, timeouts and retries are how
fast and how stubbornly, not what."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from howtocap.errors import HowtocapError

Format = Literal["mp4", "webm", "any"]


class DownloadConfig(BaseModel):
    """Defaults as video2dataset's YouTube reader and HowTo100M: mp4 at most 360p with its
    audio, English automatic captions as WebVTT."""

    format: Format = "mp4"
    max_height: int = Field(360, gt=0)
    audio: bool = True
    max_size: int = Field(2 * 1024**3, gt=0)  # bytes; a larger file is aborted mid-stream
    sub_langs: list[str] = Field(default_factory=lambda: ["en"])
    workers: int = Field(8, ge=1)  # downloads wait on the network: threads
    connect_timeout: float = Field(10.0, gt=0)
    read_timeout: float = Field(30.0, gt=0)  # no byte for this long: the attempt fails
    retries: int = Field(3, ge=0)  # of transient failures (timeouts, 5xx, 429, resets)
    backoff: float = Field(1.0, ge=0)  # seconds before the first retry, doubled each time
    storage_options: dict[str, dict[str, Any]] = Field(default_factory=dict)  # by protocol
    keep_media: bool = True

    def fingerprint(self) -> dict[str, Any]:
        return {"format": self.format, "max_height": self.max_height, "audio": self.audio,
                "max_size": self.max_size, "sub_langs": list(self.sub_langs)}


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """``500M``, ``2G``, ``1.5GB``, ``800k`` or bytes -> bytes (powers of 1024)."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    if m is None:
        raise HowtocapError(f"--max-size: not a size: {text!r} (e.g. 500M, 2G)")
    scale = 1024 ** "bkmgt".index((m.group(2) or "b").lower())
    return int(float(m.group(1)) * scale)


def parse_storage_options(text: str | None) -> dict[str, dict[str, Any]]:
    """``--storage-options`` JSON: ``{"s3": {"endpoint_url": …}, "gs": {…}}`` (fsspec's
    options per protocol), or one flat object applied to every protocol."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HowtocapError(f"--storage-options: not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise HowtocapError("--storage-options: expected a JSON object")
    if all(isinstance(v, dict) for v in value.values()) and value:
        return value
    return {"*": value}
