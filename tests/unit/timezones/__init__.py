"""Unit and acceptance tests of the timezones package (no database needed)."""
