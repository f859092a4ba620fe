"""Expert server benchmark: ``python -m benchmarks.bench_experts [--requests N] [--flood]``.

Builds tiny random checkpoints in a temporary Hugging Face cache (benchmarks/harness/tinymodels.py), starts the
real server (``python -m expert_server``) and prints:

* server overhead per request: p50 of ``POST /models/<tiny ViT>`` against calling the same
  transformers pipeline in process (target: within 5 ms, ratio <= 1.1 is only meaningful when
  inference dominates; both figures are printed);
* requests per second at 50 concurrent on a tiny text classifier, micro-batching on and off;
* start-up time until ``/readyz`` (cache scan and the libraries' imports), and cold load time: of
  the first model (first request minus a warm one) and of a second model (its whole first request);
* peak RSS growth (over the server's RSS with its libraries loaded) while 5 models are requested
  in turn under a budget of 2 models' size (target: never above the budget + 10 %), and which
  models are still loaded afterwards (the others were evicted, least recently used first).

``--batching`` (issue 35) instead prints, for a tiny ViT and a tiny BERT classifier, for both
at 6 layers of 384 (where inference, not HTTP, is most of a request's cost), and for a classifier
of the size of transformers' default one (DistilBERT, 6 layers of 768), the requests
per second of the server at 16 concurrent clients against the items per second of the same
pipeline called in process on lists of 16 (``batch_size=16``), their ratio (target >= 0.8), and the
batches the server ran (its ``/models`` counters), and the cores the server and the load generator
used meanwhile (both share this machine's cores with the in-process figure's one torch thread).

The server's event loop (HTTP, JSON, queueing) shares the interpreter's lock with the inference
thread, which needs it between torch's operations: the last row runs the in-process pipeline again
beside a thread that runs Python for the share of the time the server's loop ran (bursts of
:data:`PYTHON_BURST`), the ceiling of a server that serves HTTP and runs inference in one process.
The server's own settings come from the environment as usual: ``HUGGINGGPT_EXPERTS_BATCH_REFILL_MS=0``
measures it without waiting for a batch's callers after it (``expert_server.queues.Refill``).

``--flood`` (issue 39) instead floods one server at once with large bodies (text over its limits),
many large images and long audio clips, each retrying its 503s for a minute as the bot would,
and prints its peak RSS growth (over its RSS with the models loaded and each library's code
mapped by one small request of each kind: neither is in the budget's inputs) against its memory
budget (target <= 110 %), how each kind of request was answered, and the p50/p99 latency of a
small text request sent every 20 ms during the flood.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from expert_server.memory import rss_bytes  # noqa: E402
from benchmarks import run_on  # noqa: E402
from benchmarks.harness import tinymodels  # noqa: E402
from benchmarks.harness.realparts import cpu_seconds, free_port  # noqa: E402


def _mid_vit(out: Path) -> None:
    tinymodels.vit(out, layers=6, hidden=384)  # about 43 MB


REPOS = {"tiny/vit": (tinymodels.vit, "image-classification"),
         "tiny/bert-cls": (tinymodels.bert("BertForSequenceClassification"), "text-classification"),
         **{f"mid/vit-{i}": (_mid_vit, "image-classification") for i in range(5)}}


def start(cache: Path, config: str, tmp: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, float]:
    """Start ``python -m expert_server`` (``env``: more environment variables); (process, URL,
    seconds until ``/readyz`` answered 200)."""
    port = free_port()
    cfg = tmp / f"server-{port}.toml"
    cfg.write_text(config)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "expert_server", "--port", str(port), "--device", "cpu", "--config",
                             str(cfg)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 180 and proc.poll() is None:
        try:
            if httpx2.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url, time.perf_counter() - t0
        except httpx2.HTTPError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the expert server did not get ready within 180 s")


def png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.open(ROOT / "tests/fixtures/media/chelsea.png").convert("RGB").resize((64, 48)).save(buf, "PNG")
    return buf.getvalue()


def p50(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def overhead(url: str, snap: Path, n: int) -> tuple[float, float, float, float]:
    """p50 in process, p50 through the server (calls interleaved, so both see the same machine
    load), cold load of the first model (libraries imported then) and of a second one (ms)."""
    from PIL import Image
    from transformers import pipeline

    data = png()
    pipe = pipeline("image-classification", model=str(snap), device="cpu")
    headers = {"Content-Type": "image/png"}
    local, remote = [], []
    with httpx2.Client(timeout=60) as http:
        t = time.perf_counter()
        http.post(f"{url}/models/tiny/vit", content=data, headers=headers).raise_for_status()
        cold = time.perf_counter() - t
        t = time.perf_counter()
        http.post(f"{url}/models/tiny/bert-cls", json={"inputs": "the cat"}).raise_for_status()
        cold2 = time.perf_counter() - t
        for _ in range(5):
            pipe(Image.open(io.BytesIO(data)).convert("RGB"))
        for _ in range(n):
            t = time.perf_counter()
            pipe(Image.open(io.BytesIO(data)).convert("RGB"))
            local.append(time.perf_counter() - t)
            t = time.perf_counter()
            http.post(f"{url}/models/tiny/vit", content=data, headers=headers).raise_for_status()
            remote.append(time.perf_counter() - t)
    return p50(local), p50(remote), cold * 1000 - p50(remote), cold2 * 1000


async def throughput(url: str, total: int, concurrency: int = 50) -> float:
    sem = asyncio.Semaphore(concurrency)
    texts = [" ".join(tinymodels.WORDS[i % 20: i % 20 + 6]) for i in range(total)]
    async with httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=concurrency)) as http:
        async def one(text: str) -> None:
            async with sem:
                (await http.post(f"{url}/models/tiny/bert-cls", json={"inputs": text})).raise_for_status()
        await one("warm up")
        t = time.perf_counter()
        await asyncio.gather(*(one(x) for x in texts))
        return total / (time.perf_counter() - t)


def peak_rss(url: str, pid: int, models: list[str]) -> tuple[int, int]:
    """(baseline RSS with the libraries loaded, peak RSS) while ``models`` are requested in turn."""
    data = png()
    with httpx2.Client(timeout=60) as http:
        http.post(f"{url}/models/tiny/vit", content=data, headers={"Content-Type": "image/png"}).raise_for_status()
        http.post(f"{url}/models/tiny/bert-cls", json={"inputs": "the cat"}).raise_for_status()
        base = rss_bytes(pid)
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_bytes(pid))
                time.sleep(0.01)

        th = threading.Thread(target=sample)
        th.start()
        for m in models:
            http.post(f"{url}/models/{m}", content=data, headers={"Content-Type": "image/png"}).raise_for_status()
        stop.set()
        th.join()
    return base, peak[0]


FLOOD_BUDGET = 200_000_000
FLOOD_RETRY = 60  # seconds a flood request retries its 503s
FLOOD_REPOS = {"tiny/vit": REPOS["tiny/vit"], "tiny/bert-cls": REPOS["tiny/bert-cls"],
               "tiny/asr": (tinymodels.wav2vec2("Wav2Vec2ForCTC"), "automatic-speech-recognition")}


def _wav(seconds: int, noise: bool) -> bytes:
    import wave

    clip = io.BytesIO()
    with wave.open(clip, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(os.urandom(2 * 16000 * seconds) if noise else bytes(2 * 16000 * seconds))
    return clip.getvalue()


def _flood_inputs() -> dict[str, tuple[str, bytes, str, int]]:
    """kind → (model, body, content type, how many at once)."""
    from PIL import Image

    import base64

    buf = io.BytesIO()
    Image.new("RGB", (2000, 2000), (200, 40, 40)).save(buf, "PNG")  # 4 Mpx in a few kB
    noise = io.BytesIO()
    Image.frombytes("RGB", (2000, 2000), os.urandom(2000 * 2000 * 3)).save(noise, "PNG")  # 12 MB: incompressible
    image_json = b'{"inputs": "' + base64.b64encode(noise.getvalue()) + b'", "parameters": {"top_k": 2}}'  # 16 MB
    text = b'{"inputs": "' + b"the cat " * 4_000_000 + b'"}'  # 32 MB of text
    return {"large body (32 MB of text)": ("tiny/bert-cls", text, "application/json", 8),
            "large body (16 MB JSON, an image in base64)": ("tiny/vit", image_json, "application/json", 8),
            "large image (4 Mpx)": ("tiny/vit", buf.getvalue(), "image/png", 48),
            "long audio (2 min)": ("tiny/asr", _wav(120, noise=True), "audio/wav", 4)}


def _prober(url: str, pid: int, stop: threading.Event, peak: list[int], latencies: list[float]) -> None:
    """In a thread of its own (the flood's client loop is busy): the peak RSS of ``pid`` and the
    latency of a small text request every 20 ms (``inf`` for one that was not answered 200)."""
    with httpx2.Client(timeout=60) as http:
        while not stop.is_set():
            t = time.perf_counter()
            r = http.post(f"{url}/models/tiny/bert-cls", json={"inputs": "the cat"})
            latencies.append(time.perf_counter() - t if r.status_code == 200 else float("inf"))
            end = time.perf_counter() + 0.02
            while time.perf_counter() < end:
                peak[0] = max(peak[0], rss_bytes(pid))
                time.sleep(0.002)


async def _flood(url: str, pid: int) -> tuple[int, dict[str, dict[int, int]], list[float]]:
    """(peak RSS, statuses per kind, latencies of the small request in seconds) of one flood."""
    inputs = _flood_inputs()
    peak, latencies, stop = [rss_bytes(pid)], [], threading.Event()
    prober = threading.Thread(target=_prober, args=(url, pid, stop, peak, latencies))
    prober.start()
    try:
        async with httpx2.AsyncClient(timeout=300, limits=httpx2.Limits(max_connections=200)) as http:
            async def one(model: str, body: bytes, ctype: str) -> int:
                """Its final status: a 503 is retried, as the bot does, for up to FLOOD_RETRY seconds."""
                end = time.monotonic() + FLOOD_RETRY
                while True:
                    r = await http.post(f"{url}/models/{model}", content=body, headers={"Content-Type": ctype})
                    if r.status_code != 503 or time.monotonic() > end:
                        return r.status_code
                    await asyncio.sleep(0.25)

            kinds = list(inputs)
            codes = await asyncio.gather(*(one(*inputs[k][:3]) for k in kinds for _ in range(inputs[k][3])))
    finally:
        stop.set()
        prober.join()
    out: dict[str, dict[int, int]] = {}
    at = 0
    for k in kinds:
        n = inputs[k][3]
        out[k] = {c: codes[at:at + n].count(c) for c in sorted(set(codes[at:at + n]))}
        at += n
    return peak[0], out, latencies


def _warm(url: str) -> None:
    """One small request of each kind: the models load and each library maps its code."""
    with httpx2.Client(timeout=120) as http:
        http.post(f"{url}/models/tiny/bert-cls", json={"inputs": "the cat"}).raise_for_status()
        http.post(f"{url}/models/tiny/vit", content=png(), headers={"Content-Type": "image/png"}).raise_for_status()
        http.post(f"{url}/models/tiny/asr", content=_wav(1, noise=False),
                  headers={"Content-Type": "audio/wav"}).raise_for_status()


def flood(tmp: Path) -> list[tuple[str, str]]:
    """The ``--flood`` rows."""
    tinymodels.build_cache(tmp / "cache", FLOOD_REPOS)
    proc, url, _ = start(tmp / "cache", f"memory_budget = {FLOOD_BUDGET}\n", tmp)
    try:
        _warm(url)
        base = rss_bytes(proc.pid)  # models loaded, each library's code mapped: what the budget does not cover
        peak, codes, lat = asyncio.run(_flood(url, proc.pid))
        time.sleep(2)
        after = rss_bytes(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    lat.sort()
    rows = [("memory budget", f"{FLOOD_BUDGET / 1e6:.0f} MB"),
            ("peak RSS growth during the flood", f"{(peak - base) / 1e6:.1f} MB ({(peak - base) / FLOOD_BUDGET:.0%} of the "
                                                 "budget; target <= 110%)"),
            ("RSS growth 2 s after the flood", f"{(after - base) / 1e6:.1f} MB")]
    rows += [(f"answers, {k}", ", ".join(f"{n} x {c}" for c, n in v.items())) for k, v in codes.items()]
    rows += [("small request during the flood", f"{len(lat)} sent, {sum(x == float('inf') for x in lat)} not 200, "
                                                f"p50 {lat[len(lat) // 2] * 1000:.0f} ms, "
                                                f"p99 {lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000:.0f} ms")]
    return rows


BATCH = 16  # concurrent requests, and the in-process batch they are compared with


def _mid_bert(out: Path) -> None:
    """A BERT classifier of 6 layers of 384 (about 40 MB) with the word tokenizer: inference, not
    HTTP, is most of a request's cost."""
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=tinymodels.VOCAB_SIZE, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                     intermediate_size=1536, max_position_embeddings=64, **tinymodels.labelled(["negative", "positive"]))
    BertForSequenceClassification(cfg).save_pretrained(out)
    tinymodels.word_tokenizer().save_pretrained(out)


def _distilbert(out: Path) -> None:
    """A DistilBERT classifier of the size of transformers' default text-classification model
    (``distilbert/distilbert-base-uncased-finetuned-sst-2-english``: 6 layers of 768, about 260
    MB), random weights and the word tokenizer."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(vocab_size=tinymodels.VOCAB_SIZE, max_position_embeddings=64,
                           **tinymodels.labelled(["NEGATIVE", "POSITIVE"]))
    DistilBertForSequenceClassification(cfg).save_pretrained(out)
    tinymodels.word_tokenizer().save_pretrained(out)


BATCH_REPOS = {"tiny/vit": REPOS["tiny/vit"], "tiny/bert-cls": REPOS["tiny/bert-cls"],
               "mid/vit": (_mid_vit, "image-classification"), "mid/bert-cls": (_mid_bert, "text-classification"),
               "base/distilbert-cls": (_distilbert, "text-classification")}
BATCH_LABELS = {"tiny/vit": "tiny ViT", "tiny/bert-cls": "tiny BERT", "mid/vit": "ViT 6x384", "mid/bert-cls": "BERT 6x384",
                "base/distilbert-cls": "DistilBERT 6x768"}


def _batch_inputs(model: str) -> tuple[list, dict]:
    """``BATCH`` distinct request bodies for ``model`` (bytes or JSON) and their headers."""
    if model.endswith("vit"):
        return [png()] * BATCH, {"Content-Type": "image/png"}
    return [{"inputs": " ".join(tinymodels.WORDS[i: i + 6])} for i in range(BATCH)], {}


PYTHON_BURST = 0.0007
"""Seconds of one burst of Python in ``--batching``'s last row: the server's loop CPU per request."""


@contextlib.contextmanager
def _frozen() -> Iterator[None]:
    """Keep what this process holds now (torch, transformers, the test models) out of its garbage
    collector's reach while a figure is measured (``gc.freeze``): a full collection of them took
    233 ms in the middle of a run, stopping the load generator's 16 clients (or the in-process
    pipeline), and the figure measured this process instead of the server or the model."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _python_beside(share: float, stop: threading.Event) -> None:
    """Run pure Python ``share`` of the time (bursts of :data:`PYTHON_BURST` s, sleeping between)
    until ``stop``: what the server's event loop adds beside its inference thread."""
    while not stop.is_set():
        end = time.perf_counter() + PYTHON_BURST
        while time.perf_counter() < end:
            pass
        time.sleep(PYTHON_BURST * (1 - share) / max(share, 0.01))


def in_process(snap: Path, task: str, model: str, seconds: float, threads: int, beside: float) -> tuple[float, float]:
    """Items per second of ``pipeline(task)`` called on lists of ``BATCH`` inputs (images decoded
    from their PNG bytes in the loop, as the server decodes each request's), torch on ``threads``:
    ``(alone, beside a thread running Python for the share `beside` of the time)``. Both threads
    need the interpreter's lock, the pipeline between torch's operations, so the second figure is
    what one process that also serves HTTP can reach."""
    import torch
    from PIL import Image
    from transformers import pipeline

    torch.set_num_threads(threads)
    pipe = pipeline(task, model=str(snap), device="cpu")
    bodies, _ = _batch_inputs(model)

    def one() -> None:
        if model.endswith("vit"):
            pipe([Image.open(io.BytesIO(b)).convert("RGB") for b in bodies], batch_size=BATCH)
        else:
            pipe([b["inputs"] for b in bodies], batch_size=BATCH, truncation=True)

    def rate() -> float:
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < seconds:
            one()
            n += BATCH
        return n / (time.perf_counter() - t)
    for _ in range(5):
        one()
    with _frozen():
        alone = rate()
        stop = threading.Event()
        python = threading.Thread(target=_python_beside, args=(beside, stop))
        python.start()
        try:
            return alone, rate()
        finally:
            stop.set()
            python.join()


async def concurrent(url: str, model: str, seconds: float, server: int) -> tuple[float, float, float, float]:
    """Requests per second of ``BATCH`` clients each sending one request after another, and the
    cores (CPU seconds per second) the server process ``server``, its event loop (main thread) and
    this load generator used.
    The clients send as the bot does (httpx2 on :class:`pipeline.wire.AiohttpTransport`, on the
    program's event loop): httpx2's own transport costs the load generator twice the CPU per
    request, on the cores the server is measured on."""
    from pipeline.wire import AiohttpTransport

    bodies, headers = _batch_inputs(model)
    async with httpx2.AsyncClient(timeout=60, transport=AiohttpTransport(max_connections=BATCH)) as http:
        async def client(i: int, end: float) -> int:
            body, n = bodies[i], 0
            while time.perf_counter() < end:
                r = await (http.post(f"{url}/models/{model}", content=body, headers=headers) if isinstance(body, bytes)
                           else http.post(f"{url}/models/{model}", json=body))
                r.raise_for_status()
                n += 1
            return n
        await asyncio.gather(*(client(i, time.perf_counter() + 1) for i in range(BATCH)))  # warm up
        with _frozen():
            t, mine = time.perf_counter(), time.process_time()
            theirs, loop = cpu_seconds(server), cpu_seconds(server, server)
            counts = await asyncio.gather(*(client(i, t + seconds) for i in range(BATCH)))
            wall = time.perf_counter() - t
        return (sum(counts) / wall, (cpu_seconds(server) - theirs) / wall, (cpu_seconds(server, server) - loop) / wall,
                (time.process_time() - mine) / wall)


def batching(tmp: Path, seconds: float, threads: int) -> list[tuple[str, str]]:
    """The ``--batching`` rows: torch on ``threads`` threads in both places (on a shared machine,
    its OpenMP threads spinning against other processes otherwise decide the figure). The server
    is measured first: the in-process pipeline is then measured alone and beside a thread running
    Python for the share of the time the server's event loop ran."""
    snaps = tinymodels.build_cache(tmp / "cache", BATCH_REPOS)
    rows = []
    for model, label in BATCH_LABELS.items():
        proc, url, _ = start(tmp / "cache", f"max_batch_size = {BATCH}\n", tmp, {"OMP_NUM_THREADS": str(threads)})
        try:
            remote, server_cores, loop_cores, client_cores = run_on("program", concurrent(url, model, seconds, proc.pid))
            row = next(m for m in httpx2.get(f"{url}/models").json()["models"] if m["id"] == model)
        finally:
            proc.terminate()
            proc.wait(10)
        local, beside = in_process(snaps[model], BATCH_REPOS[model][1], model, seconds, threads, loop_cores)
        stats = row.get("batches")
        shown = (f"{stats['items']} requests in {stats['runs']} runs (mean {stats['items'] / max(1, stats['runs']):.1f}, "
                 f"largest {stats['largest']})" if stats else "not reported")
        rows += [(f"{label}: in process, lists of {BATCH}", f"{local:.0f} items/s"),
                 (f"{label}: server, {BATCH} concurrent", f"{remote:.0f} req/s"),
                 (f"{label}: ratio server / in process", f"{remote / local:.2f} (target >= 0.8)"),
                 (f"{label}: server batches", shown),
                 (f"{label}: cores used by the server (its event loop) / the load generator",
                  f"{server_cores:.2f} ({loop_cores:.2f}) / {client_cores:.2f} of {os.cpu_count()}"),
                 (f"{label}: in process beside Python {loop_cores:.0%} of the time (the server loop's share)",
                  f"{beside:.0f} items/s ({beside / local:.2f} of alone: one lock for both threads)")]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--flood", action="store_true", help="flood one server and print its memory against its budget")
    ap.add_argument("--batching", action="store_true",
                    help=f"the server at {BATCH} concurrent against in-process batches of {BATCH}")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds each --batching figure is measured over")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads in process and in the server (--batching)")
    args = ap.parse_args(argv)
    if args.batching:
        with tempfile.TemporaryDirectory() as d:
            _print(batching(Path(d), args.seconds, args.threads))
        return 0
    if args.flood:
        with tempfile.TemporaryDirectory() as d:
            _print(flood(Path(d)))
        return 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        snaps = tinymodels.build_cache(tmp / "cache", REPOS)
        rows = []
        procs = []
        try:
            proc, url, ready = start(tmp / "cache", "max_batch_size = 16\n", tmp)
            procs.append(proc)
            local, remote, cold, cold2 = overhead(url, snaps["tiny/vit"], args.requests)
            rows += [("p50 in process (tiny ViT)", f"{local:.2f} ms"), ("p50 through the server", f"{remote:.2f} ms"),
                     ("server overhead p50", f"{remote - local:.2f} ms (ratio {remote / local:.2f})"),
                     ("start-up until ready (scan, imports)", f"{ready * 1000:.0f} ms"),
                     ("cold load, first model (tiny ViT)", f"{cold:.0f} ms"),
                     ("cold load, second model (whole first request)", f"{cold2:.0f} ms")]
            rows.append(("req/s at 50 concurrent, batching on", f"{asyncio.run(throughput(url, args.requests * 2)):.0f}"))
            proc2, url2, _ = start(tmp / "cache", "max_batch_size = 1\n", tmp)
            procs.append(proc2)
            rows.append(("req/s at 50 concurrent, batching off", f"{asyncio.run(throughput(url2, args.requests * 2)):.0f}"))
            mid = httpx2.get(f"{url}/models").json()
            size = next(m["size_bytes"] for m in mid["models"] if m["id"] == "mid/vit-0")
            budget = 2 * size + 1_000_000  # two mid models, and the two tiny ones
            proc3, url3, _ = start(tmp / "cache", f"memory_budget = {budget}\n", tmp)
            procs.append(proc3)
            base, peak = peak_rss(url3, proc3.pid, [f"mid/vit-{i}" for i in range(5)])
            rows += [("budget (2 models)", f"{budget / 1e6:.1f} MB"),
                     ("peak RSS growth, 5 models in turn", f"{(peak - base) / 1e6:.1f} MB "
                      f"({(peak - base) / budget:.0%} of the budget; target <= 110%)")]
            listed = httpx2.get(f"{url3}/models").json()["models"]
            kept = sorted(m["id"] for m in listed if m["state"] == "loaded" and m["id"].startswith("mid/"))
            rows.append(("still loaded after the 5 (rest evicted)", ", ".join(kept) or "none"))
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
    _print(rows)
    return 0


def _print(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
