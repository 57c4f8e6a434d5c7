# Prometheus, promtool and Alertmanager for tests/test_alerts_e2e.py and tests/test_prometheus.py: the binaries
# unpacked from Debian's prometheus and prometheus-alertmanager packages into ~/.cache/ralph-supervise/test-tools
# (downloaded with apt, never installed: the packages' postinst would start both as system services).
python -m tests.helpers.debian_binaries prometheus:prometheus prometheus:promtool \
    prometheus-alertmanager:prometheus-alertmanager >/dev/null
