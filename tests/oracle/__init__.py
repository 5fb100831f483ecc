"""A brute-force oracle for the recurrence engine (tests only, never imported by the engine)."""
