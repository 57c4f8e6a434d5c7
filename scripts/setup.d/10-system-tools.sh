# Debian's tools the tests use, where missing: tmux (the terminal and watch tests), e2fsprogs (chattr, mkfs.ext4:
# the immutable-folder and full-disk fault tests), util-linux (unshare, mount, losetup: namespaces, tiny disks),
# git (the workspace's commits). One apt call for all that are missing.
missing=()
have tmux || missing+=(tmux)
{ have chattr && have mkfs.ext4; } || missing+=(e2fsprogs)
{ have unshare && have losetup && have mount; } || missing+=(util-linux mount)
have git || missing+=(git)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
