-- Schema version 1: conversations, turns (text, answer, status), resources.
-- Released: never edit this file; add a new numbered file instead.

CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    created REAL NOT NULL
);

CREATE TABLE turns (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    user_text TEXT NOT NULL,
    answer TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, idx)
);

CREATE TABLE resources (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    origin TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    turn INTEGER,
    PRIMARY KEY (conversation_id, id)
);
