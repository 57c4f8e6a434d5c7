# The real Codex CLI 0.171.0 from the npm registry, for tests/test_real_agents_offline.py: run here without a
# network it prints its own reconnect reports (REFERENCE.md section 8), which the outage rule is tested on.
# Installed into ./.agent-clis (ignored by git; apart from ./node_modules, which another install prunes).
have node || apt_install nodejs || true
have npm || apt_install npm || true
if have npm && [ ! -x .agent-clis/node_modules/.bin/codex ]; then
    npm install --prefix .agent-clis --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
        @openai/codex@0.171.0 >/dev/null 2>&1 || true
fi
