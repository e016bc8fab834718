# ctxhost's Python fork server: one per plugin, started exactly as a one-shot
# hook would be (same interpreter, flags, environment, cwd, sandbox, uid), as
# `python3 -B -c <this file>` with fd 0 a unix SOCK_SEQPACKET socket to the host.
#
# It imports a fixed set of side-effect-free stdlib modules, then waits. Each
# message on fd 0 is one call: a JSON header and four fds (the call's own
# socket, the hook's stdin, stdout and stderr). The call runs in a *spare*:
# a child the server forked while it had nothing else to do, which has done
# what every call does first (own process group, child subreaper, signals,
# every inherited fd closed, a rehearsal that copies the pages a call writes)
# and waits on a socket of its own. The server passes it the header and the
# three pipes; the spare sets the call up (fds, environment, argv,
# sys.path[0]) and runs the hook script as `__main__` with the interpreter's
# own exit rules. The server sends the host the spare's pidfd and, once it
# has exited, kills what is left of its process group, reaps it, kills
# whatever it left behind, and sends the wait status.
#
# The server never runs hook code itself: nothing a call does reaches the
# next one (each call runs in a process forked from the server, never from
# another call's). It compiles the scripts of recent calls while idle
# (`_CODE`): a child whose script's source is the same runs that code. It
# writes nothing but to its control sockets and stderr.
import os
import sys

_BASELINE = frozenset(sys.modules)

# The preimported set (see the module doc of forkserver/mod.rs for how it
# was measured). Only side-effect-free stdlib modules: no files written, no
# network, no threads, no atexit handler the child keeps.
PRELOAD = (
    "json", "re", "time", "datetime", "pathlib", "hashlib", "collections",
    "traceback", "typing", "tempfile", "subprocess", "threading", "random",
    "base64", "uuid", "copy", "string", "textwrap", "struct", "math",
    "functools", "itertools", "urllib.parse", "shutil", "argparse",
    "dataclasses", "logging", "inspect",
)

# The script's directory must not shadow what is loaded now: preimport with
# nothing but the standard path entries.
_path0 = sys.path.pop(0) if sys.path and sys.path[0] in ("", os.getcwd()) else None
for _name in PRELOAD:
    try:
        __import__(_name)
    except Exception:  # noqa: BLE001 - a missing module is only not preloaded
        pass
import atexit
import ctypes
import gc
import hashlib
import importlib.machinery
import json
import selectors
import signal
import socket
import stat
import threading
import types
import warnings

_LIBC = ctypes.CDLL(None, use_errno=True)
# What the interpreter added to its own environment at start (PEP 538's
# LC_CTYPE coercion): a spawned hook has it too. The host restarts the
# server whenever a call's environment differs from the server's beyond
# the per-call variables, so what is here and not in a call's was added.
_STARTUP_ENV = dict(os.environ)
_PR_SET_CHILD_SUBREAPER = 36
# What a script's directory could shadow: every top-level module loaded by
# now beyond what the interpreter had before this code ran.
_SHADOWABLE = frozenset(m.split(".")[0] for m in set(sys.modules) - _BASELINE)
_LOADED = frozenset(sys.modules)
_MAX_MSG = 1 << 20

# Compiled hook scripts, keyed by path and a digest of the source: a child
# whose script reads the same runs the code compiled from it here (a spawned
# interpreter compiles its script on every start; compiling is deterministic
# for the same source, name and flags). Filled by the server while idle, so
# the spares forked afterwards have it. Never a script whose compiling
# warns: the warning is the hook's stderr, each call.
_CODE = {}
_CODE_LIMIT = 64
_MAX_SOURCE = 1 << 20


def _digest(source):
    """What `_CODE` keys a script's source by."""
    return hashlib.blake2b(source, digest_size=16).digest()


def _read_source(path):
    """A regular file's bytes, or None: never blocks on a FIFO, never big."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_SOURCE:
            return None
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > _MAX_SOURCE:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _cache_code(path):
    """Compiles `path` into `_CODE` if its source is new. True if it changed."""
    source = _read_source(path)
    if source is None:
        return False
    key = (path, _digest(source))
    if key in _CODE:
        return False
    for old in [k for k in _CODE if k[0] == path]:
        del _CODE[old]
    if len(_CODE) >= _CODE_LIMIT:
        _CODE.clear()
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            code = compile(source, path, "exec", dont_inherit=True)
    except Exception:  # noqa: BLE001 - the child reports it, as a spawn would
        return False
    if not warned:
        _CODE[key] = code
    return True


def _rehearse():
    """In a spare, before its call: does what every call does with objects
    the call will not see, so the pages those writes copy (fork shares them
    copy-on-write) are copied now, not while the call waits."""
    main = types.ModuleType("__rehearsal__")
    main.__loader__ = importlib.machinery.SourceFileLoader("__rehearsal__", os.devnull)
    code = compile(_REHEARSAL, "<rehearsal>", "exec", dont_inherit=True)
    exec(code, main.__dict__)
    _clear(main.__dict__)
    del main, code
    os.environ["CTXHOST_REHEARSAL"] = "1"
    del os.environ["CTXHOST_REHEARSAL"]
    json.loads('[["PATH", "/usr/bin:/bin"], ["HOME", "/nonexistent"]]')
    os.path.realpath(os.devnull)
    try:
        with open(os.devnull, "rb") as f:
            f.read()
    except OSError:
        pass
    _digest(b"")
    # The finalisation's walk of `sys.modules` (touching every name's count).
    _new_modules()
    print("", end="", file=sys.stdout)
    _flush_std()
    gc.collect()


_REHEARSAL = """
import json, sys
request = json.loads('{"type": "ingest", "agent_id": "a", "message": "m", "peer_id": null}')
reply = json.dumps({"type": "ingest_result", "memories": [{"content": "c", "score": 0.5}]}) + "\\n"
"""


def _shadowed(script_dir):
    """A loaded module a file or package in `script_dir` would replace."""
    try:
        names = os.listdir(script_dir)
    except OSError:
        return None
    for entry in names:
        stem = entry.split(".", 1)[0]
        if stem not in _SHADOWABLE:
            continue
        full = os.path.join(script_dir, entry)
        if entry.endswith((".py", ".pyc", ".so")) or os.path.isfile(os.path.join(full, "__init__.py")):
            return stem
    return None


def _exit_code_of(exc):
    """The interpreter's handling of an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        if sys.stderr is not None:
            sys.stderr.write(str(code))
            sys.stderr.write("\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def _flush_std():
    """The interpreter's flush_std_files: False when stdout could not be flushed."""
    ok = True
    out = sys.stdout
    if out is not None and not getattr(out, "closed", True):
        try:
            out.flush()
        except Exception as e:  # noqa: BLE001
            try:
                sys.stderr.write("Exception ignored in: %r\n%s: %s\n" % (out, type(e).__name__, e))
            except Exception:  # noqa: BLE001
                pass
            ok = False
    err = sys.stderr
    if err is not None and not getattr(err, "closed", True):
        try:
            err.flush()
        except Exception:  # noqa: BLE001
            pass
    return ok


def _spare(sock):
    """In a child forked ahead of its call: make the call-independent part
    of a hook process ready, wait on `sock` for the call (a header and the
    hook's stdin, stdout and stderr), set it up, run the script, exit.
    Never returns. Nothing of the call exists before it arrives: what this
    child does first is what every spawned hook would do at its start."""
    status = 1
    try:
        os.setpgid(0, 0)
        _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Nothing of the server's (its control socket copy aside: fd 0,
        # replaced below) and nothing of other calls stays open here.
        top = os.sysconf("SC_OPEN_MAX")
        top = top if 0 < top < 1 << 16 else 1 << 16
        os.closerange(3, sock)
        os.closerange(sock + 1, top)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        atexit._clear()
        # The call's environment replaces this one wholesale: empty it now.
        os.environ.clear()
        try:
            _rehearse()
        except Exception:  # noqa: BLE001 - only ever a cost, never the call's business
            pass
        channel = socket.socket(fileno=sock)
        msg, fds, _, _ = socket.recv_fds(channel, _MAX_MSG, 3)
        if len(fds) != 3:
            os._exit(1)  # the server went away, or a bug of its own
        call = json.loads(msg)
        if call.get("go"):
            # The host moves this process into the call's cgroup first;
            # the server passes its `g` on through this socket (it alone
            # reads the call's).
            if channel.recv(1) != b"g":
                os._exit(1)
        channel.close()
        stdin, stdout, stderr = fds
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        for key, value in call["env"]:
            os.environ[key] = value
        for key, value in _STARTUP_ENV.items():
            if key not in os.environ:
                os.environ[key] = value
        script = call["script"]
        sys.argv[:] = call["argv"]
        sys.path[0:0] = [os.path.dirname(os.path.realpath(script))]
        status = _run_main(script)
    except BaseException:  # noqa: BLE001 - the setup itself failed
        try:
            import traceback

            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status & 0xFF)


def _run_main(script):
    """Runs `script` as `__main__` and finalises as the interpreter does."""
    import builtins

    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    main.__spec__ = None
    main.__package__ = None
    main.__annotations__ = {}
    sys.modules["__main__"] = main
    status = 0
    interrupted = False
    try:
        with open(script, "rb") as f:
            source = f.read()
        code = _CODE.get((script, _digest(source)))
        if code is None:
            code = compile(source, script, "exec", dont_inherit=True)
        del source
        exec(code, main.__dict__)
    except SystemExit as e:
        status = _exit_code_of(e)
    except BaseException as e:  # noqa: BLE001 - the interpreter's uncaught exception
        tb = e.__traceback__
        # Our own frame is not the script's.
        tb = tb.tb_next if tb is not None else None
        e.__traceback__ = tb
        interrupted = isinstance(e, KeyboardInterrupt)
        try:
            sys.excepthook(type(e), e, tb)
        except BaseException:  # noqa: BLE001
            pass
        status = 1
        del e, tb
    # Py_FinalizeEx: non-daemon threads, atexit, flush, then the modules go
    # (objects' __del__, files flushed by their finaliser), flush again.
    try:
        threading._shutdown()
    except BaseException:  # noqa: BLE001
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    flushed = _flush_std()
    if not flushed:
        status = 120
    try:
        # Newest names first: an object's finaliser still finds what the
        # script imported before it (as the interpreter's dict teardown does).
        sys.modules.pop("__main__", None)
        _clear(main.__dict__)
        for name in reversed(_new_modules()):
            module = sys.modules.get(name)
            if module is not None and isinstance(getattr(module, "__dict__", None), dict):
                _clear(module.__dict__)
        del main
        gc.collect()
    except BaseException:  # noqa: BLE001
        pass
    # The interpreter's second flush finds the streams gone once the first failed.
    if flushed and not _flush_std():
        status = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def _new_modules():
    """The modules imported since the server started, oldest first."""
    return [m for m in sys.modules if m not in _LOADED]


def _clear(namespace):
    for key in reversed(list(namespace)):
        if key != "__builtins__":
            try:
                del namespace[key]
            except BaseException:  # noqa: BLE001 - a finaliser that raises
                pass


_CHILDREN_FD = []


def _children():
    """Pids of this server's children (its threads: only the main one).
    The `children` file stays open: read again from its start, it is new."""
    try:
        if not _CHILDREN_FD:
            path = "/proc/self/task/%d/children" % os.getpid()
            _CHILDREN_FD.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        text, chunk = b"", b""
        while True:
            chunk = os.pread(_CHILDREN_FD[0], 1 << 16, len(text))
            if not chunk:
                break
            text += chunk
        return [int(p) for p in text.split()]
    except OSError:
        return []


class Spare:
    """A child forked ahead of the call it will run, waiting on `sock`."""

    def __init__(self, pid, sock, pidfd):
        self.pid = pid
        self.sock = sock
        self.pidfd = pidfd


class Server:
    def __init__(self, control):
        self.control = control
        self.sel = selectors.DefaultSelector()
        self.sel.register(control, selectors.EVENT_READ, ("control", None))
        # pid -> [call socket fd, pidfd, the spare's socket while it waits for `g`]
        self.calls = {}
        # The next call's process, forked while no call runs: the fork (the
        # biggest part of a call's cost) is then off the next call's path.
        self.spare = None
        # A fork failed (a process limit): no spare until a call comes.
        self.spare_failed = False
        # Scripts of recent calls, to (re)compile into `_CODE` while idle.
        self.to_compile = set()

    def run(self):
        while True:
            # Not while a call runs: on a machine with few cores the fork
            # and the spare's rehearsal would take CPU from that call.
            chores = not self.calls and (self.to_compile or (self.spare is None and not self.spare_failed))
            events = self.sel.select(0 if chores else None)
            if not events and chores:
                self.chores()
                continue
            for key, _ in events:
                kind, pid = key.data
                if kind == "control":
                    if not self.accept():
                        return
                elif kind == "exit":
                    self.finish(pid)
                elif kind == "hangup":
                    self.hangup(pid)

    def chores(self):
        """What the server does while no call runs: compile the scripts
        of recent calls, then fork the next call's process (which so has
        them compiled)."""
        changed = False
        while self.to_compile:
            changed |= _cache_code(self.to_compile.pop())
        if changed and self.spare is not None:
            self.drop_spare(self.spare)
            self.spare = None
        if self.spare is None and not self.spare_failed:
            try:
                self.spare = self.fork_spare()
            except OSError:
                self.spare_failed = True

    def fork_spare(self):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            raise
        if pid == 0:
            try:
                _spare(theirs.detach())
            finally:
                os._exit(1)
        theirs.close()
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = -1
        return Spare(pid, mine, pidfd)

    def take_spare(self):
        """The waiting spare, or a child forked now (calls overlap)."""
        spare, self.spare = self.spare, None
        self.spare_failed = False
        return spare if spare is not None else self.fork_spare()

    def drop_spare(self, spare):
        spare.sock.close()
        try:
            os.kill(spare.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(spare.pid, 0)
        except ChildProcessError:
            pass
        if spare.pidfd >= 0:
            os.close(spare.pidfd)

    def accept(self):
        try:
            msg, fds, flags, _ = socket.recv_fds(self.control, _MAX_MSG, 4)
        except OSError:
            return False
        if not msg and not fds:
            return False  # the host closed the control socket: stop
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return True
        try:
            call = json.loads(msg)
        except ValueError:
            call = None
        sock = fds[0]
        shadow = _shadowed(os.path.dirname(os.path.realpath(call["script"]))) if call else "?"
        if shadow is not None:
            self.reply(sock, {"declined": "the script's directory shadows `%s`" % shadow})
            for fd in fds:
                os.close(fd)
            return True
        spare = None
        for _ in range(2):
            try:
                spare = self.take_spare()
                socket.send_fds(spare.sock, [msg], fds[1:])
                break
            except OSError:
                # A spare that died while it waited (or no fork possible).
                if spare is not None:
                    self.drop_spare(spare)
                spare = None
        for fd in fds[1:]:
            os.close(fd)
        if spare is None:
            self.reply(sock, {"declined": "cannot fork the call's process"})
            os.close(sock)
            return True
        go = spare.sock.detach() if call.get("go") else -1
        spare.sock.close()
        pid, pidfd = spare.pid, spare.pidfd
        self.calls[pid] = [sock, pidfd, go]
        self.to_compile.add(call["script"])
        self.reply(sock, {"pid": pid}, [pidfd] if pidfd >= 0 else [])
        if pidfd >= 0:
            self.sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        self.sel.register(sock, selectors.EVENT_READ, ("hangup", pid))
        return True

    def reply(self, sock, obj, fds=()):
        try:
            _send(sock, obj, list(fds))
        except OSError:
            pass

    def hangup(self, pid):
        """The host closed the call's socket (its deadline, a cancelled call), or sent `go`."""
        entry = self.calls.get(pid)
        if entry is None:
            return
        sock = entry[0]
        try:
            data = os.read(sock, 64)
        except OSError:
            data = b""
        if data:
            # `g`: the host has moved the child into its cgroup: let it run.
            self.release(entry, data[:1])
            return
        self.sel.unregister(sock)
        entry[0] = -1
        os.close(sock)
        self.release(entry, b"")
        try:
            os.kill(pid, signal.SIGKILL)  # unreaped: the pid is still the child's
        except OSError:
            pass

    def release(self, entry, byte):
        """Passes the host's `g` to a child waiting for it (or, with none,
        closes its socket: the child then exits without running the script)."""
        if entry[2] < 0:
            return
        try:
            if byte:
                os.write(entry[2], byte)
        except OSError:
            pass
        os.close(entry[2])
        entry[2] = -1

    def finish(self, pid):
        entry = self.calls.pop(pid)
        sock, pidfd = entry[0], entry[1]
        self.release(entry, b"")
        self.sel.unregister(pidfd)
        if sock >= 0:
            self.sel.unregister(sock)
        # The child has exited but is not reaped: its group id cannot have
        # been reused, so what is left of the group can be killed.
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
        os.close(pidfd)
        self.sweep()
        if sock >= 0:
            self.reply(sock, {"status": status})
            os.close(sock)

    def sweep(self):
        """Kills and reaps every child that is neither a running call nor
        the spare: what a finished call's process left behind (reparented
        to this subreaper)."""
        keep = set(self.calls)
        if self.spare is not None:
            keep.add(self.spare.pid)
        for _ in range(10000):
            strays = [p for p in _children() if p not in keep]
            if not strays:
                return
            for p in strays:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            for p in strays:
                try:
                    os.waitpid(p, 0)
                except ChildProcessError:
                    pass


def _send(fd, obj, fds):
    s = socket.socket(fileno=os.dup(fd))
    try:
        socket.send_fds(s, [json.dumps(obj).encode()], fds)
    finally:
        s.close()


def main():
    _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    control = socket.socket(fileno=0)
    # fd 0 is the control socket: the server's own stdin object must never
    # read from it, and the child re-points fd 0 at the call's stdin.
    gc.collect()
    gc.freeze()
    Server(control).run()


main()
