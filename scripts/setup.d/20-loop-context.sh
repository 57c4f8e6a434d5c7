# loop-context 1.5.0 from the npm registry, for tests/test_check_vs_loop_context.py (node and npm from Debian
# where missing). Installed into ./node_modules (ignored by git); the test finds it there.
have node || apt_install nodejs || true
have npm || apt_install npm || true
scripts/install-loop-context.sh >/dev/null
