-- 0004: the device registry (scheduler.devices): the devices each subject's reminders go to.
CREATE TABLE devices (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id uuid,
    subject text NOT NULL,
    channel text NOT NULL,
    token text NOT NULL,
    platform text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    last_success_at timestamptz,
    invalidated_at timestamptz,
    invalid_reason text,
    CONSTRAINT devices_subject_check CHECK (length(subject) BETWEEN 1 AND 200),
    CONSTRAINT devices_channel_check CHECK (channel ~ '^[a-z][a-z0-9_]{0,31}$'),
    CONSTRAINT devices_token_check CHECK (octet_length(token) BETWEEN 1 AND 2048),
    CONSTRAINT devices_platform_check CHECK (length(platform) BETWEEN 1 AND 32),
    CONSTRAINT devices_invalid_reason_check CHECK (
        invalid_reason IS NULL OR (invalidated_at IS NOT NULL AND length(invalid_reason) <= 500)
    ),
    CONSTRAINT devices_channel_token_key UNIQUE (channel, token)
) WITH (fillfactor = 90);

-- The delivery read: the valid devices of a batch of (organization, subject) pairs. The subject
-- leads because it is compared with =; the organization is compared with IS NOT DISTINCT FROM
-- (no organization is a value), which is no index operator, so it is checked on the index entry.
CREATE INDEX devices_subject_idx ON devices (subject, organization_id)
    WHERE invalidated_at IS NULL;
