# Grafana's published dashboard types (@grafana/schema) and the TypeScript compiler from the npm registry, for
# tests/test_grafana_schema.py (the dashboard checked against Grafana's schema offline). Into a cache folder
# outside the repository (tests/helpers/grafana_schema.py says why); node and npm come from 20-loop-context.sh.
python -m tests.helpers.grafana_schema install >/dev/null
