"""The download step's typed settings. Only what changes the fetched files is fingerprinted
(format, height, audio, size limit, subtitle languages): workers, timeouts and retries are how
fast and how stubbornly, not what."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from howtocap.errors import HowtocapError

Format = Literal["mp4", "webm", "any"]


class DownloadConfig(BaseModel):
    """Defaults as video2dataset's YouTube reader and HowTo100M. Fields with a description are
    flags of ``howtocap download`` and ``run``; sizes, languages and options are typed as text."""

    format: Format = Field("mp4", description=(
        "Container of downloaded videos (yt-dlp merges video and audio into it); any: "
        "whatever the site has."))
    max_height: int = Field(360, gt=0, description=(
        "Largest video height fetched from YouTube and other sites (the smallest there is "
        "when none is that small)."))
    audio: bool = Field(True, description="Keep the audio track (ASR needs it when a video "
                                          "has no captions).")
    max_size: int = Field("2G", gt=0, validate_default=True,  # type: ignore[arg-type]
                          json_schema_extra={"text": True}, description=(
        "Largest file fetched (e.g. 500M, 2G); a larger one fails as 'too large', aborted "
        "mid-stream."))
    sub_langs: list[str] = Field("en", validate_default=True,  # type: ignore[arg-type]
                                 json_schema_extra={"text": True}, description=(
        "YouTube automatic-caption languages fetched as WebVTT (comma separated; '' for "
        "none): the video's sidecar subtitles."))
    workers: int = Field(8, ge=1, description="Downloads in parallel (threads: they wait on "
                                              "the network).")
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to connect to a server.")
    read_timeout: float = Field(30.0, gt=0, description=(
        "Seconds without a byte before a download attempt fails ('timeout')."))
    retries: int = Field(3, ge=0, description=(
        "Retries of transient download failures (timeouts, HTTP 5xx and 429, dropped "
        "connections), with doubling backoff."))
    backoff: float = Field(1.0, ge=0)  # seconds before the first retry, doubled each time
    storage_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, json_schema_extra={"text": True}, description=(
            'fsspec options as JSON, per protocol: \'{"s3": {"endpoint_url": '
            '"http://127.0.0.1:9000", "anon": true}}\' (else the usual AWS_* / GOOGLE_* '
            'environment). Never written to the run.'))
    keep_media: bool = Field(True, json_schema_extra={"switch": True}, description=(
        "false: delete each downloaded video once align has used its frames (clip export "
        "then downloads it again)."))

    @field_validator("max_size", mode="before")
    @classmethod
    def _size(cls, text: Any) -> Any:
        """``500M``, ``2G``, ``1.5GB``, ``800k`` or bytes -> bytes (powers of 1024)."""
        if not isinstance(text, str):
            return text
        m = _SIZE.match(text)
        if m is None:
            raise HowtocapError(f"--max-size: not a size: {text!r} (e.g. 500M, 2G)")
        return int(float(m.group(1)) * 1024 ** "bkmgt".index((m.group(2) or "b").lower()))

    @field_validator("sub_langs", mode="before")
    @classmethod
    def _langs(cls, value: Any) -> Any:
        return [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) \
            else value

    @field_validator("storage_options", mode="before")
    @classmethod
    def _storage(cls, text: Any) -> Any:
        """``--storage-options`` JSON: ``{"s3": {"endpoint_url": …}, "gs": {…}}`` (fsspec's
        options per protocol), or one flat object applied to every protocol."""
        if not isinstance(text, str) or not text:
            return {} if text == "" else text
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HowtocapError(f"--storage-options: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise HowtocapError("--storage-options: expected a JSON object")
        return value if value and all(isinstance(v, dict) for v in value.values()) \
            else {"*": value}

    def fingerprint(self) -> dict[str, Any]:
        return self.model_dump(include={"format", "max_height", "audio", "max_size", "sub_langs"})


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
