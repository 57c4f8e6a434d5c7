# tmux (Debian's package): the terminal tests read a real tmux pane with capture-pane (the countdown that
# updates in place, Ctrl-S in a pane). Without it those tests skip, saying so.
have tmux || apt_install tmux || true
