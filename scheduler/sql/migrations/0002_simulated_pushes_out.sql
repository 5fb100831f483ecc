-- 0002: the simulated provider's table leaves the scheduler's core schema for its own opt-in
-- component (scheduler.simulated). An empty table goes; one that holds deliveries stays, and the
-- component's first migration adopts it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM simulated_pushes) THEN
        DROP TABLE simulated_pushes;
    END IF;
END
$$;
