"""The serve tests' fixtures: `browser` is the viewer tests' headless Chromium (Debian's, via
Playwright). Servers are started by serve_process.start_server and stopped by each test."""
from tests.viewer.conftest import browser  # noqa: F401  one definition of the Chromium fixture
