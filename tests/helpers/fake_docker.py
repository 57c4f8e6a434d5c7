#!/usr/bin/env python3
"""A fake container engine for the tests: `fake_docker.py daemon SOCKET` is the engine, started by a test
apart from the supervised tree; a copy named `docker` is the client a loop runs. As with the real one, the
agent of `docker run … IMAGE CMD…` runs in the engine's process tree, not the client's: it writes into the
workspace (the bind mount) and its output streams back to the client. `pause`, `unpause` and `kill
[--signal SIG] NAME` act on the container's processes; signals to the client reach nothing.

The client finds the engine through FAKE_DOCKER_SOCKET; the engine runs commands with FAKE_DOCKER_PATH first
on PATH (where the test put the agent the "image" holds).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

VALUED = {"--format", "-f", "--name", "-v", "--volume", "-w", "--workdir", "-e", "--env", "--cidfile", "-u", "--user", "--signal", "-s"}
TRAILER = b"\0EXIT "


def parse(argv: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """(verb, options, rest) of a docker command line (rest: image and command, or container and command)."""
    verb, args = argv[0], argv[1:]
    options: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in VALUED and i + 1 < len(args):
            options[args[i]] = args[i + 1]
            i += 2
        else:
            options[args[i]] = ""
            i += 1
    return verb, options, args[i:]


class Engine:
    def __init__(self, path: str) -> None:
        self.path = path
        self.containers: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.Lock()

    def handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            request = json.loads(reader.readline())
            verb, options, rest = parse(request["argv"])
            if verb in ("run", "exec"):
                self.run(conn, verb, options, rest, request["cwd"])
            elif verb == "inspect":
                with self.lock:
                    proc = self.containers.get(rest[-1]) if rest else None
                if proc is None or proc.poll() is not None:
                    conn.sendall(TRAILER + b"1\n")
                else:
                    conn.sendall(f"{proc.pid}\n".encode() + TRAILER + b"0\n")
            elif verb in ("pause", "unpause", "kill"):
                sig = {"pause": signal.SIGSTOP, "unpause": signal.SIGCONT}.get(verb)
                if verb == "kill":
                    sig = getattr(signal, "SIG" + options.get("--signal", "KILL").removeprefix("SIG"))
                with self.lock:
                    proc = self.containers.get(rest[0]) if rest else None
                code = 1
                if proc is not None and proc.poll() is None:
                    try:
                        os.killpg(proc.pid, sig)
                        code = 0
                    except ProcessLookupError:
                        pass
                conn.sendall(TRAILER + str(code).encode() + b"\n")
            else:
                conn.sendall(TRAILER + b"125\n")

    def run(self, conn: socket.socket, verb: str, options: dict[str, str], rest: list[str], cwd: str) -> None:
        name = options.get("--name", f"c{threading.get_ident()}")
        command = rest[1:] if verb == "run" else rest[1:]
        env = {**os.environ, "PATH": f"{self.path}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        for pair in (options.get("-e"), options.get("--env")):
            if pair and "=" in pair:
                key, value = pair.split("=", 1)
                env[key] = value
        proc = subprocess.Popen(command, cwd=options.get("-w", cwd), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        with self.lock:
            self.containers[name] = proc
        if "--cidfile" in options:
            with open(options["--cidfile"], "w") as fh:
                fh.write(name)
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            try:
                conn.sendall(chunk)
            except OSError:
                break
        code = proc.wait()
        try:
            conn.sendall(TRAILER + str(code if code >= 0 else 128 - code).encode() + b"\n")
        except OSError:
            pass

    def stop(self, *_: object) -> None:
        with self.lock:
            for proc in self.containers.values():
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        os._exit(0)


def daemon(path: str) -> None:
    engine = Engine(os.environ.get("FAKE_DOCKER_PATH", ""))
    signal.signal(signal.SIGTERM, engine.stop)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=engine.handle, args=(conn,), daemon=True).start()


def client(argv: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["FAKE_DOCKER_SOCKET"])
    conn.sendall(json.dumps({"argv": argv, "cwd": os.getcwd()}).encode() + b"\n")
    out = sys.stdout.buffer
    pending = b""
    while True:
        data = conn.recv(65536)
        if not data:
            return 125
        pending += data
        at = pending.find(TRAILER)
        if at >= 0 and pending.endswith(b"\n"):
            out.write(pending[:at])
            out.flush()
            return int(pending[at + len(TRAILER):].strip() or 125)
        keep = len(TRAILER) + 8
        if len(pending) > keep:
            out.write(pending[:-keep])
            out.flush()
            pending = pending[-keep:]


if __name__ == "__main__":
    if sys.argv[1:2] == ["daemon"]:
        daemon(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
