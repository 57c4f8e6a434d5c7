# The `serve` page tests drive a real Chromium: Debian's package, through Playwright's Python package
# (a test extra in pyproject.toml). Playwright is never asked to download a browser of its own.
have chromium || apt_install chromium || true
