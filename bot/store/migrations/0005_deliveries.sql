-- Schema version 5. Released: never edit this file; add a new numbered file instead.
--
-- * platform deliveries already taken by some process (Slack event ids and (channel, ts)): a
--   redelivery that reaches another process on the same data dir is answered once. Rows older
--   than a day are deleted as new ones arrive.

CREATE TABLE deliveries (
    key TEXT PRIMARY KEY,
    at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX deliveries_at ON deliveries(at);
