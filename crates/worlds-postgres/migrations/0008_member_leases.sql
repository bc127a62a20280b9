-- Each member's own lease (`DatabaseConfig::lease_duration`), in milliseconds: a member is dead
-- once its heartbeat is older than its own lease, whatever lease the member looking at it uses.
-- NULL for members of builds before this migration: the looking member's lease applies.
ALTER TABLE members ADD COLUMN lease_ms bigint;
