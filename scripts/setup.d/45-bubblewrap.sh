# bubblewrap (Debian's package): the --sandbox bwrap tests run real loops in a real box. Without it
# those tests skip, saying so.
have bwrap || apt_install bubblewrap || true
