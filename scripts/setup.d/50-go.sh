# go (Debian's golang-go, 1.19 on bookworm): tests/test_verify_go.py runs `go test` plain, -v and -json on the
# small module in tests/fixtures/verify/go_shop and checks the verify's reader against it. Without it that
# test skips, saying so. (cargo-nextest has no prebuilt package on a registry reachable here.)
have go || apt_install golang-go || true
