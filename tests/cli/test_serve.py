"""`howtocap serve` as a real process: who may listen where, and that a key really guards it.

The server binds 0.0.0.0 (or is refused before binding); requests only ever go to 127.0.0.1.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.cli import ZygoteChild, run_cli, start_cli
from tests.support.search import free_port, shared_run, shared_sample

KEY_VAR = "HOWTOCAP_E2E_KEY"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_run(tmp_path_factory.mktemp("cli_serve"))


@contextmanager
def serving(run: Path, *flags: str, env: dict[str, str] | None = None
            ) -> Iterator[tuple[str, ZygoteChild | subprocess.Popen[str]]]:
    """Start `howtocap serve RUN --port P FLAGS`, wait until /healthz answers, stop it after."""
    port = free_port()
    proc = start_cli("serve", str(run), "--port", str(port), *flags, run_env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited with {proc.returncode}: "
                                     f"{proc.communicate()[1]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not answer /healthz in time"
            time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def first_hit_is_the_cat(resp: httpx.Response) -> None:
    """The query names step 2 of "kitchen" in other words: its clip must come first."""
    assert resp.status_code == 200, resp.text
    hits = resp.json()["hits"]
    step = shared_sample("kitchen").steps[1]
    assert hits and hits[0]["video_id"] == "kitchen"
    assert (hits[0]["start"], hits[0]["end"]) == pytest.approx((step.start, step.end))


@pytest.mark.slow
def test_all_interfaces_with_an_api_key(run: Path) -> None:
    key = secrets.token_urlsafe(24)
    q = {"q": "a cat being brushed", "k": 3}
    with serving(run, "--host", "0.0.0.0", "--api-key-env", KEY_VAR,
                 env={KEY_VAR: key}) as (url, proc):
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.get("/api/search", params=q).status_code == 401
            assert c.get("/api/search", params=q,
                         headers={"Authorization": f"Bearer {key}x"}).status_code == 401
            assert c.get("/api/videos").status_code == 401
            first_hit_is_the_cat(c.get("/api/search", params=q,
                                       headers={"Authorization": f"Bearer {key}"}))
            first_hit_is_the_cat(c.get("/api/search", params=q, headers={"X-API-Key": key}))
            assert c.get("/healthz").json()["clips"] == 6  # liveness needs no key
        proc.terminate()
        stdout = proc.communicate(timeout=20)[0]
    assert "on http://0.0.0.0:" in stdout and "API key required" in stdout
    assert key not in stdout  # the key is never printed


@pytest.mark.slow
def test_all_interfaces_public_without_a_key(run: Path) -> None:
    with serving(run, "--host", "0.0.0.0", "--public") as (url, proc):
        first_hit_is_the_cat(httpx.get(f"{url}/api/search",
                                       params={"q": "a cat being brushed"}, timeout=30))
        proc.terminate()
        stdout = proc.communicate(timeout=20)[0]
    assert "no API key" in stdout and "--public without an API key" in stdout


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "env", "message"), [
    (["--host", "0.0.0.0"], {}, "refusing to listen on 0.0.0.0 (not a loopback address)"),
    (["--host", "0.0.0.0", "--api-key-env", KEY_VAR], {KEY_VAR: ""},
     f"--api-key-env {KEY_VAR}: environment variable {KEY_VAR} is not set or empty"),
])
def test_exposure_without_a_usable_key_is_refused_in_one_line(
        run: Path, flags: list[str], env: dict[str, str], message: str) -> None:
    res = run_cli("serve", str(run), "--port", str(free_port()), *flags, timeout=120,
                  run_env=env)
    assert res.returncode == 2, (res.stdout, res.stderr)
    # one message (the console may wrap it), before anything was served
    assert res.stderr.count("error:") == 1 and message in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr and "serving" not in res.stdout
