"""``ConversationStore.files_of`` on both backends (SQLite, and a real PostgreSQL server when
installed): one owner's files across conversations, in order, page by page, by origin."""

from __future__ import annotations

from pathlib import Path

from bot.incoming import ConversationKey

PNG = (Path(__file__).resolve().parent / "fixtures" / "media" / "chelsea.png").read_bytes()


async def test_files_of_pages_an_owners_files_across_conversations(new_store):
    now = [1000.0]
    store = new_store(clock=lambda: now[0])
    await store.open()
    try:
        made = []  # (conversation id, resource id), oldest first
        for thread, owner in (("a", "k1"), ("b", "k1"), ("c", "k2"), ("a", "k1")):
            cid = await store.get_or_create(ConversationKey("api", owner, "chat", thread))
            turn = await store.begin_turn(cid, "draw", None)
            for origin in ("user", "task:1"):
                now[0] += 1
                res = await store.add_resource(cid, turn, PNG + origin.encode(), kind="image", mime="image/png",
                                               origin=origin, description="a cat")
                if owner == "k1":
                    made.append((cid, res.id))

        def ids(files):
            return [(f.conversation_id, f.resource.id) for f in files]

        newest = await store.files_of("api", "k1", limit=100)
        assert ids(newest) == made[::-1]
        assert [f.created for f in newest] == sorted((f.created for f in newest), reverse=True)
        assert newest[0].resource.path.read_bytes() == PNG + b"task:1" and newest[0].resource.mime == "image/png"
        pages, after = [], None
        while page := await store.files_of("api", "k1", limit=4, order="asc", after=after):
            pages.append(ids(page))
            after = ids(page)[-1]
        assert pages == [made[:4], made[4:]]
        generated = await store.files_of("api", "k1", limit=100, origin="task")
        assert ids(generated) == [m for m in made[::-1] if m[1] in {f.resource.id for f in generated}]
        assert all(f.resource.origin != "user" for f in generated) and len(generated) == 3
        assert ids(await store.files_of("api", "k1", limit=1, only=made[2])) == [made[2]]
        assert await store.files_of("api", "k2", limit=1, only=made[2]) == []  # not k2's
        assert await store.files_of("api", "nobody", limit=10) == []
        assert await store.files_of("api", "k1", limit=10, after=("0000000000", "image-1")) == []
    finally:
        await store.close()
