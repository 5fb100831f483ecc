-- Named queries on the apns_provider_tokens table (scheduler/push/apns.py): the issue time
-- every worker process signs its APNs provider token with, per (team, key).

-- name: apns_provider_token_claim
-- The iat to sign with: the stored one unless it is at least the refresh age old by the
-- caller's clock (the now parameter, epoch seconds), else the caller's now, stored. The
-- conflicting row is locked and re-read at its newest version, and always updated (to
-- itself when fresh), so RETURNING gives the newest committed value: of processes that race
-- past the refresh age, exactly one renews and the others return its iat.
INSERT INTO apns_provider_tokens AS t (team_id, key_id, issued_at)
VALUES (%(team_id)s::text, %(key_id)s::text, %(now)s::bigint)
ON CONFLICT (team_id, key_id) DO UPDATE
SET issued_at = CASE WHEN t.issued_at <= excluded.issued_at - %(refresh_after)s::bigint
                     THEN excluded.issued_at ELSE t.issued_at END
RETURNING issued_at;
