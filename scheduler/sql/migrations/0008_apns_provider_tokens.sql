-- 0008: the APNs provider token's issue time, shared by every worker process of one key.
CREATE TABLE apns_provider_tokens (
    team_id text NOT NULL,
    key_id text NOT NULL,
    issued_at bigint NOT NULL,
    PRIMARY KEY (team_id, key_id)
);
