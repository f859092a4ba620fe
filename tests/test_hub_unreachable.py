"""Keys set but no route to the Hugging Face Hub: the run says what it waits for, says that the Hub
could not be reached, keeps using what it last knew, and ends in seconds, not minutes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

from pipeline.catalog import SHIPPED_CATALOG, Availability, Catalog
from sandbox.faulty_controller import FaultyController
from tests.standins.hub import HubStandIn, reference_hub_models


async def test_the_last_known_state_is_used_when_the_hub_goes_away() -> None:
    top = Catalog.load(SHIPPED_CATALOG).candidates("object-detection")[:4]
    async with HubStandIn(reference_hub_models(), page_size=7) as hub:
        av = Availability(provider="auto", base_url=None, endpoints={}, token=None, ttl=0.2, hub_endpoint=hub.url)
        served = [c.id for c in await av.filter(top)]
        assert served and len(served) < len(top)  # the stand-in serves some of them, not all
    await asyncio.sleep(0.3)  # the answers expired, and the Hub is gone
    assert [c.id for c in await av.filter(top)] == served
    assert av.hub_unreachable
    fresh = Availability(provider="auto", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    assert await fresh.filter(top) == []  # never answered: nothing is claimed


def test_a_hub_that_never_answers_is_named_while_waiting_and_after(tmp_path):
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    c = FaultyController().start()
    try:
        c.answer = "Hello from the controller."
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
        env.update({
            "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": c.url,
            "HUGGINGGPT_LLM__API_KEY": "sk-test-0000", "HF_TOKEN": "hf_test_token",
            "HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
        })
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "hello there"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    finally:
        c.close()
        silent.close()
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    out, progress = p.stdout, p.stderr  # progress goes to stderr when stdout is not a terminal
    waiting = progress.index("Checking on the Hugging Face Hub which models can run now")
    assert waiting < progress.index("The Hugging Face Hub could not be reached")
    assert "Hello from the controller." in out
    assert "Error" not in progress and "controller LLM" not in out + progress  # nobody blames the controller
    assert took < 30  # one look-up timing out (5 s), not one per model
