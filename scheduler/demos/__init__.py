"""The demos behind ``make demo`` and ``make demo-queue``: programs beside the library."""
