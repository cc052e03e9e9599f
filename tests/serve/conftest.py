"""The serve tests' browser is tests/conftest.py's one headless Chromium (`browser`). Servers are
started by serve_process.start_server and stopped by each test."""
