"""``howtocap index`` / ``search`` / ``serve``: each flag is one library argument."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import DeviceOpt, err, user_errors
from howtocap.encoders.defaults import ENCODER
from howtocap.knn import INDEX_TYPE, IndexType
from howtocap.search import BY, By, K
from howtocap.serve.defaults import HOST, MAX_BODY_BYTES, MAX_K, MAX_QUERY_CHARS, PORT, RATE_LIMIT

RunDirArg = Annotated[Path, typer.Argument(help="Run directory (made by `howtocap caption`).")]
EncoderOpt = Annotated[str | None, typer.Option(
    "--encoder", help="Encoder name (default: `default` for index, the index's own for search).")]


@user_errors
def index_cmd(
    run_dir: RunDirArg,
    encoder: EncoderOpt = None,
    device: DeviceOpt = None,
    rebuild: Annotated[bool, typer.Option(help="Drop the old index (needed to change "
                                               "encoder).")] = False,
    index_type: Annotated[IndexType, typer.Option(
        help="auto: exact up to 50k clips, HNSW above.")] = INDEX_TYPE,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Index the kept clips (caption text + clip video embeddings) for `search` and `serve`."""
    from howtocap.search.index import build_index

    info = build_index(run_dir, encoder or ENCODER, device=device, rebuild=rebuild,
                       index_type=index_type, progress=not as_json)
    if as_json:
        typer.echo(json.dumps(info.to_dict(), indent=2))
        return
    err.print(f"indexed {info.n} clips of {len(info.embedded) + len(info.reused)} videos "
              f"({info.index_type}, encoder {info.encoder}, from {info.source}/) in "
              f"{info.seconds:.1f} s: {len(info.embedded)} embedded, {len(info.reused)} reused, "
              f"{len(info.removed)} removed -> {info.path}", highlight=False)
    if info.no_video:
        err.print(f"[yellow]note:[/yellow] {len(info.no_video)} videos have no readable video "
                  f"file; they are found by caption text only: {', '.join(info.no_video[:5])}",
                  highlight=False)


@user_errors
def search_cmd(
    run_dir: RunDirArg,
    query: Annotated[str, typer.Argument(help="What to look for, e.g. \"cut the tomato\".")],
    k: Annotated[int, typer.Option("-k", "--k", min=1, max=10_000,
                                   help="Number of results.")] = K,
    by: Annotated[By, typer.Option(help="Compare the query with caption text, clip video, "
                                        "or both (mean of the two similarities).")] = BY,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as JSON.")] = False,
    encoder: EncoderOpt = None,
    device: DeviceOpt = None,
) -> None:
    """Find moments: prints video, time range, caption and score (or JSON)."""
    from howtocap.search.query import Searcher, format_hits

    searcher = Searcher.open(run_dir, encoder, device=device)
    typer.echo(format_hits(searcher.search(query, k=k, by=by), as_json=as_json))


@user_errors
def serve_cmd(
    run_dir: RunDirArg,
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but loopback "
                                           "needs --api-key-env or --public.")] = HOST,
    port: Annotated[int, typer.Option(help="Port.")] = PORT,
    encoder: EncoderOpt = None,
    device: DeviceOpt = None,
    max_k: Annotated[int, typer.Option(min=1, help="Largest k the API accepts.")] = MAX_K,
    max_query_chars: Annotated[int, typer.Option(min=1, help="Longest query accepted.")
                               ] = MAX_QUERY_CHARS,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="VAR",
        help="Require the key in environment variable VAR on every request (Authorization: "
             "Bearer KEY, X-API-Key: KEY, or a browser login with KEY as password).")] = None,
    public: Annotated[bool, typer.Option(
        help="Allow a non-loopback --host without an API key (anyone who can reach the "
             "machine can search and download the videos).")] = False,
    rate_limit: Annotated[float, typer.Option(
        min=0, help="Requests per second per client (bursts of 3x allowed); beyond it 429 "
                    "with Retry-After. 0 = no limit.")] = RATE_LIMIT,
    max_body_bytes: Annotated[int, typer.Option(
        min=0, help="Largest request body accepted (413 beyond it).")] = MAX_BODY_BYTES,
) -> None:
    """Serve the search page, per-video timelines and the JSON API (/api/docs), with /healthz
    and Prometheus /metrics."""
    from howtocap.serve.app import serve
    from howtocap.serve.guard import api_key_from_env

    serve(run_dir, host=host, port=port, encoder=encoder, device=device, max_k=max_k,
          max_query_chars=max_query_chars,
          api_key=api_key_from_env(api_key_env) if api_key_env else None, public=public,
          rate_limit=rate_limit, max_body_bytes=max_body_bytes)
