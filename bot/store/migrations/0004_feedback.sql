-- Schema version 4. Released: never edit this file; add a new numbered file instead.
--
-- * feedback on answers (the Slack feedback buttons): one verdict per user and turn, the latest
--   click wins; removed with its conversation.

CREATE TABLE feedback (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    user TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('good', 'bad')),
    at REAL NOT NULL,
    PRIMARY KEY (conversation_id, idx, user)
) WITHOUT ROWID;
