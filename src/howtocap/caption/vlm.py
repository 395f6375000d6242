"""Visually grounded captions (HowToCaption A.1, the MiniGPT-4 variant): each block's prompt
goes to a multimodal chat server with frames sampled across the block's time span; what is sent
is in docs/captions.md. The reply is parsed, constrained, retried and circuit-broken exactly as
an ``--llm-url`` reply (the same ``OpenAIChatLLM`` client sends it).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # blocks loads pandas; the CLI builds these options at start-up
    from howtocap.llm.base import Messages

# Put before the template's text when frames are attached: the templates only speak of speech.
VLM_INSTRUCTION = (
    "The images above are {n} frames of this video segment, in time order, each after its "
    "time in seconds. Write timestamped captions of what is seen and said: name the actions "
    "and the objects visible in the frames, and use the speech for what the frames do not "
    "show. Follow the instructions below for the form of each caption.\n\n"
)


class VLMOptions(BaseModel):
    """The multimodal server and what is sent to it per block (the CLI's --vlm-* flags).

    API key, concurrency, timeout and retries are the --llm-url ones (``LLMOptions``)."""

    model_config = ConfigDict(extra="forbid")

    url: str
    model: str | None = None
    frames: int = Field(4, ge=1, le=32)  # per block, evenly across its time span
    frame_side: int = Field(336, ge=28, le=4096)  # the shorter side at most this (px)
    jpeg_quality: int = Field(85, ge=1, le=100)

    def identity(self) -> dict[str, Any]:
        """What changes a caption: the server, the model, the frames and the added words."""
        return {"kind": "server", "url": self.url.rstrip("/"), "model": self.model or "",
                "frames": self.frames, "frame_side": self.frame_side,
                "jpeg_quality": self.jpeg_quality, "instruction": VLM_INSTRUCTION}


def attach_frames(messages: Messages, frames: list[tuple[float, bytes]]) -> Messages:
    """The same messages with the frames and ``VLM_INSTRUCTION`` in the last (user) turn."""
    last = messages[-1]
    parts: list[dict[str, Any]] = [part for t, jpeg in frames for part in (
        {"type": "text", "text": f"Frame at {t:.1f}s:"},
        {"type": "image_url", "image_url": {
            "url": "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")}})]
    text = VLM_INSTRUCTION.format(n=len(frames)) + str(last["content"])
    return [*messages[:-1], {**last, "content": [*parts, {"type": "text", "text": text}]}]
