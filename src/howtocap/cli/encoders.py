"""``howtocap encoders``: the encoder names ``--encoder`` accepts; ``--check`` loads one."""

from __future__ import annotations

from typing import Annotated

import typer

from howtocap.cli.common import out, user_errors


@user_errors
def encoders_cmd(
    check: Annotated[list[str] | None, typer.Option(
        "--check", help="Load this encoder and print its name, dimension, image size and "
                        "device (repeatable).")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 …")] = None,
) -> None:
    """List the encoder names --encoder accepts; --check NAME loads one to verify it."""
    from howtocap.encoders import available, create

    if not check:
        out.print("\n".join(available()), highlight=False)
        return
    for name in check:
        enc = create(name, device=device)
        out.print(f"{enc.name}\tdim={enc.dim}\timage_size={enc.image_size}\t"
                  f"device={enc.device}", highlight=False)
