-- Queries of the simulated push provider (scheduler/simulated): its own table only.

-- name: simulated_push_insert
INSERT INTO simulated_pushes (effect_key, job_id, schedule_id, occurrence_key, occurrence_at,
                              subject, message, attempt)
VALUES (%(effect_key)s, %(job_id)s, %(schedule_id)s, %(occurrence_key)s, %(occurrence_at)s,
        %(subject)s, %(message)s, %(attempt)s)
