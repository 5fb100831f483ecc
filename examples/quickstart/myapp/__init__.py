"""The application of the quickstart (docs/quickstart.md): handlers and a stand-in provider."""
