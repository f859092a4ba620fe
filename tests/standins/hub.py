"""A stand-in for the Hugging Face Hub API, enough for ``HfApi.list_models``, ``HfApi.model_info``
and file downloads (``/{repo}/resolve/{revision}/{file}``), on 127.0.0.1.

Wire format as the real Hub speaks it to huggingface_hub 2.4:

* ``GET /api/models?pipeline_tag=&inference_provider=&search=&filter=&sort=&limit=&expand=...``
  returns a JSON list; with more results than one page, a ``Link: <url>; rel="next"`` header
  (GitHub style) points at the next page (``cursor`` query parameter). ``inferenceProviderMapping``
  is a *list* of ``{"provider", "providerId", "status", "task"}`` here.
* ``GET /api/models/{repo_id}?expand=inferenceProviderMapping`` returns one object whose
  ``inferenceProviderMapping`` is a *dict* keyed by provider; an unknown repo is 404 with
  ``X-Error-Code: RepoNotFound``.
* ``GET /api/whoami-v2`` returns :attr:`HubStandIn.account` (the real body's fields: ``name``,
  ``isPro``, ``canPay``, ``auth.accessToken.role`` and, for fine-grained tokens, its
  ``fineGrained.global`` permissions); without a token, 401.
* a wrong ``Authorization`` token gets 401 with ``X-Error-Message: Invalid credentials in
  Authorization header``.

Every request is recorded in :attr:`HubStandIn.requests`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from sandbox import serve_loopback

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "catalog" / "p0_models.jsonl"

CONTROLNET_IDS = [f"lllyasviel/sd-controlnet-{c}" for c in ("canny", "depth", "hed", "mlsd", "normal", "openpose", "scribble", "seg")]


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: list[tuple[str, str]]
    authorization: str | None

    def values(self, key: str) -> list[str]:
        """All values of query parameter ``key`` (``key[]`` too)."""
        return [v for k, v in self.query if k in (key, key + "[]")]


def _mapping(provider: str, status: str, task: str, model_id: str) -> dict[str, Any]:
    return {"provider": provider, "providerId": f"{provider}/{model_id.split('/')[-1]}", "status": status, "task": task}


def reference_hub_models(path: Path = FIXTURE) -> list[dict[str, Any]]:
    """Hub models built from the reference snapshot, with provider mappings by rank in each task.

    Within each task, ranked by downloads (descending): rank 0 is live on ``hf-inference``;
    rank 1 is live on ``fal-ai`` and staging on ``hf-inference``; rank 2 has an ``error`` mapping on
    ``hf-inference``; rank 3 is live on ``replicate``; every other model has no mapping. Eight
    ControlNet models (``lllyasviel/sd-controlnet-<cond>``, only ``canny`` live on ``fal-ai``), the
    annotator repos and a ControlNet without a known condition are added.

    Returns:
        dicts with ``id, pipeline_tag, downloads, likes, tags, cardData, mappings, readme``.
    """
    by_task: dict[str, list[dict[str, Any]]] = {}
    # today's Hub also has tasks the 2023 snapshot lacks (fill-mask, video-classification), with stand-in download counts
    newer = [
        {"id": "google-bert/bert-base-uncased", "pipeline_tag": "fill-mask", "task": "fill-mask", "downloads": 55_000_000,
         "likes": 2400, "meta": {"tags": ["exbert"]}, "description": "BERT base model (uncased)."},
        {"id": "FacebookAI/roberta-base", "pipeline_tag": "fill-mask", "task": "fill-mask", "downloads": 9_000_000,
         "likes": 500, "meta": {"tags": ["exbert"]}, "description": "RoBERTa base model."},
        {"id": "MCG-NJU/videomae-base-finetuned-kinetics", "pipeline_tag": "video-classification",
         "task": "video-classification", "downloads": 40_000, "likes": 40, "meta": {"tags": []},
         "description": "VideoMAE base fine-tuned on Kinetics-400."},
        {"id": "facebook/timesformer-base-finetuned-k400", "pipeline_tag": "video-classification",
         "task": "video-classification", "downloads": 20_000, "likes": 30, "meta": {"tags": []},
         "description": "TimeSformer base fine-tuned on Kinetics-400."},
    ]
    for line in [*path.read_text(encoding="utf-8").splitlines(), *(json.dumps(r) for r in newer)]:
        rec = json.loads(line)
        meta = rec.get("meta") or {}
        tags = list(meta.get("tags") or []) if isinstance(meta.get("tags"), list) else []
        pipeline_tag = rec["pipeline_tag"]
        if pipeline_tag == "conversational":  # today's Hub: chat models are tagged text-generation models
            pipeline_tag = "text-generation"
            tags.append("conversational")
        by_task.setdefault(rec["task"], []).append(
            {
                "id": rec["id"],
                "pipeline_tag": pipeline_tag,
                "downloads": int(rec["downloads"]),
                "likes": int(rec["likes"]),
                "tags": ["transformers", "pytorch", pipeline_tag, *tags, "region:us"],
                "cardData": {k: v for k, v in meta.items() if k in ("language", "license", "datasets", "tags")},
                "mappings": [],
                "readme": rec.get("description") or None,
            }
        )
    models: list[dict[str, Any]] = []
    for task, items in by_task.items():
        items.sort(key=lambda m: (-m["downloads"], -m["likes"], m["id"]))
        for rank, m in enumerate(items):
            if rank == 0:
                m["mappings"] = [_mapping("hf-inference", "live", task, m["id"])]
            elif rank == 1:
                m["mappings"] = [
                    _mapping("fal-ai", "live", task, m["id"]),
                    _mapping("hf-inference", "staging", task, m["id"]),
                ]
            elif rank == 2:
                m["mappings"] = [_mapping("hf-inference", "error", task, m["id"])]
            elif rank == 3:
                m["mappings"] = [_mapping("replicate", "live", task, m["id"])]
            models.append(m)
    for i, model_id in enumerate(CONTROLNET_IDS):
        cond = model_id.rsplit("-", 1)[-1]
        models.append(
            {
                "id": model_id,
                "pipeline_tag": None,
                "downloads": 50_000 - 1000 * i,
                "likes": 10 + i,
                "tags": ["diffusers", "controlnet", "stable-diffusion", "image-to-image", "license:openrail"],
                "cardData": {"license": "openrail", "tags": ["controlnet"]},
                "mappings": [_mapping("fal-ai", "live", "image-to-image", model_id)] if cond == "canny" else [],
                "readme": f"---\nlicense: openrail\n---\n# ControlNet - {cond}\n\nControlNet conditioned on "
                f"**{cond}** images, for use with [Stable Diffusion](https://example.org/sd).\n",
            }
        )
    for model_id, downloads in (("lllyasviel/ControlNet", 40_000), ("lllyasviel/Annotators", 30_000), ("someone/controlnet-sketchbook", 60_000)):
        models.append(
            {
                "id": model_id,
                "pipeline_tag": None,
                "downloads": downloads,
                "likes": 5,
                "tags": ["controlnet"],
                "cardData": {},
                "mappings": [],
                "readme": None,
            }
        )
    return models


def whoami_body(*, name: str = "ada", role: str = "fineGrained", permissions: tuple[str, ...] = (
        "inference.serverless.write", "repo.content.read"), can_pay: bool = True, pro: bool = False) -> dict[str, Any]:
    """A ``/api/whoami-v2`` body as the Hub sends it for a user's access token."""
    token: dict[str, Any] = {"displayName": "bot", "role": role, "createdAt": "2026-01-01T00:00:00.000Z"}
    if role == "fineGrained":
        token["fineGrained"] = {"canReadGatedRepos": False, "global": list(permissions), "scoped": []}
    return {"type": "user", "id": "64f0c0ffee", "name": name, "fullname": name.title(), "isPro": pro,
            "canPay": can_pay, "orgs": [], "auth": {"type": "access_token", "accessToken": token}}


class HubStandIn:
    """The stand-in Hub server. Use as ``async with HubStandIn(models) as hub: hub.url``.

    Args:
        models: dicts as returned by :func:`reference_hub_models`.
        page_size: results per page of ``/api/models`` (smaller than ``limit`` exercises ``Link``).
        token: if set, a request carrying another bearer token gets 401.
    """

    def __init__(self, models: list[dict[str, Any]], *, page_size: int = 20, token: str | None = None) -> None:
        self.models = {m["id"]: m for m in models}
        self.page_size = page_size
        self.token = token
        self.requests: list[RecordedRequest] = []
        self.fail_status: int | None = None  # set to make every request answer this status
        self.delay: float = 0.0  # seconds each /api/models/{id} answer waits (concurrency tests)
        self.account: dict[str, Any] = whoami_body()  # what /api/whoami-v2 answers for the token
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- lifecycle
    async def __aenter__(self) -> HubStandIn:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/api/models", self._list)
        app.router.add_get("/api/whoami-v2", self._whoami)
        app.router.add_get(r"/api/models/{repo_id:.+}", self._info)
        app.router.add_get(r"/{repo_id:.+}/resolve/{revision}/{filename}", self._resolve)
        self._runner, port = await serve_loopback(app)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def calls(self, path_prefix: str) -> list[RecordedRequest]:
        """Recorded requests whose path starts with ``path_prefix``."""
        return [r for r in self.requests if r.path.startswith(path_prefix)]

    # -- handlers
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        self.requests.append(RecordedRequest(request.method, request.path, list(request.query.items()), auth))
        if self.fail_status is not None:
            return web.json_response({"error": "stand-in failure"}, status=self.fail_status)
        if self.token is not None and auth is not None and auth != f"Bearer {self.token}":
            return web.json_response(
                {"error": "Invalid credentials in Authorization header"},
                status=401,
                headers={"X-Error-Message": "Invalid credentials in Authorization header"},
            )
        return await handler(request)

    async def _whoami(self, request: web.Request) -> web.Response:
        if not request.headers.get("Authorization"):
            return web.json_response({"error": "Invalid credentials in Authorization header"}, status=401)
        return web.json_response(self.account)

    def _public(self, m: dict[str, Any], expand: list[str], mapping_as_dict: bool) -> dict[str, Any]:
        full = {
            "_id": "id-" + m["id"],
            "id": m["id"],
            "modelId": m["id"],
            "downloads": m["downloads"],
            "likes": m["likes"],
            "tags": m["tags"],
            "private": False,
            "cardData": m["cardData"],
            "inferenceProviderMapping": (
                {x["provider"]: {k: v for k, v in x.items() if k != "provider"} for x in m["mappings"]}
                if mapping_as_dict
                else m["mappings"]
            ),
        }
        if m["pipeline_tag"]:
            full["pipeline_tag"] = m["pipeline_tag"]
        if not expand:
            return {k: v for k, v in full.items() if k not in ("cardData", "inferenceProviderMapping")}
        return {k: v for k, v in full.items() if k in ("_id", "id") or k in expand}

    async def _list(self, request: web.Request) -> web.Response:
        q = request.query
        items = list(self.models.values())
        if tag := q.get("pipeline_tag"):
            items = [m for m in items if m["pipeline_tag"] == tag]
        for f in q.getall("filter", []):
            items = [m for m in items if f in m["tags"] or f == m["pipeline_tag"]]
        if author := q.get("author"):
            items = [m for m in items if m["id"].startswith(author + "/")]
        if search := q.get("search"):
            items = [m for m in items if search.lower() in m["id"].lower()]
        providers = q.getall("inference_provider", [])
        if providers:
            def served(m: dict[str, Any]) -> bool:
                live = {x["provider"] for x in m["mappings"] if x["status"] == "live"}
                return bool(live) if "all" in providers else bool(live & set(providers))

            items = [m for m in items if served(m)]
        sort = q.get("sort")
        if sort in ("downloads", "likes"):
            items.sort(key=lambda m: (-m[sort], m["id"]))
        limit = int(q.get("limit", 1000))
        page = min(limit, self.page_size)
        cursor = int(q.get("cursor", 0))
        chunk = items[cursor : cursor + page]
        expand = q.getall("expand", []) + q.getall("expand[]", [])
        headers = {}
        if cursor + page < len(items):
            nxt = request.url.update_query({"cursor": str(cursor + page)})
            headers["Link"] = f'<{nxt}>; rel="next"'
        return web.json_response([self._public(m, expand, False) for m in chunk], headers=headers)

    async def _info(self, request: web.Request) -> web.Response:
        repo_id = request.match_info["repo_id"]
        if self.delay:
            await asyncio.sleep(self.delay)
        m = self.models.get(repo_id)
        if m is None:
            return web.json_response(
                {"error": "Repository not found"}, status=404, headers={"X-Error-Code": "RepoNotFound"}
            )
        expand = request.query.getall("expand", []) + request.query.getall("expand[]", [])
        return web.json_response(self._public(m, expand, True))

    async def _resolve(self, request: web.Request) -> web.Response:
        m = self.models.get(request.match_info["repo_id"])
        if m is None or request.match_info["filename"] != "README.md" or not m.get("readme"):
            return web.json_response(
                {"error": "Entry not found"}, status=404, headers={"X-Error-Code": "EntryNotFound"}
            )
        return web.Response(text=m["readme"], content_type="text/markdown")
