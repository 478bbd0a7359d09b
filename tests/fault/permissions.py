#!/usr/bin/env python3
"""permissions.py BINDIR — promise 5: permissions.

The daemon creates its socket directory owner-only (0700) and the socket 0600.
A forked child that drops to an unprivileged uid (nobody, via setresuid) is
stopped by those modes; with the modes opened up by the test, the daemon's own
peer-credential check must still refuse both its HELLO and its memdecayctl
request, and log why.  Segments are memfds: nothing named memdecay* appears
under /dev/shm, and the daemon's segment descriptors are anonymous
/memfd: files that the unprivileged child cannot open through /proc.
Needs root (to switch uid); skipped with a message otherwise.
"""
import os
import shutil
import pwd
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultlib import Fail, ctl_json, main  # noqa: E402

SKIP = 77


def as_nobody(fn):
    """Runs fn() in a forked child switched to nobody; fn returns (code, text).
    Returns the same pair, passed back through a pipe."""
    pw = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 91
        try:
            os.setgroups([])
            os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
            os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
            if os.geteuid() != pw.pw_uid:
                os._exit(90)
            code, text = fn()
            os.write(w, text.encode(errors="replace")[:4000])
        except BaseException as e:  # noqa: BLE001
            os.write(w, ("child: %r" % (e,)).encode())
        os._exit(code)
    os.close(w)
    text = b""
    while True:
        c = os.read(r, 4096)
        if not c:
            break
        text += c
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text.decode(errors="replace")


def hello_refused(sock):
    import socket

    def child():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect(sock)
        except PermissionError:
            return 10, "EACCES"
        try:
            s.sendall(b"HELLO abi=1.0 name=intruder page_tokens=16 page_capacity=8 max_seqs=2\n")
        except OSError:
            pass  # refused at accept: the ERR line is still there to read
        data = b""
        try:
            while not data.endswith(b"\n"):
                c = s.recv(4096)
                if not c:
                    break
                data += c
        except OSError:
            pass
        return (11 if data.startswith(b"ERR") else 12), data.decode(errors="replace")
    return child


def ctl_child(env, sock):
    # The build tree may sit where nobody cannot reach it (a clone in a 0700
    # mktemp directory): run a copy from the test's own directory instead.
    ctl = os.path.join(env.dir, "memdecayctl")
    shutil.copy(env.exe("memdecayctl"), ctl)
    os.chmod(ctl, 0o755)

    def child():
        r = subprocess.run([ctl, "--socket", sock, "get"],
                           capture_output=True, timeout=10)
        return r.returncode, r.stderr.decode()
    return child


def body(env):
    if os.geteuid() != 0:
        print("SKIP: not root, cannot switch to an unprivileged uid")
        sys.exit(SKIP)
    # /dev/shm before: nothing of ours may appear there
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    d = env.start_daemon()
    lg = env.loadgen("owner", "--seqs", 2, "--pages-per-seq", 8, "--steps", 0, "--step-hz", 200)
    rundir = os.path.dirname(env.sock)
    dmode = stat.S_IMODE(os.stat(rundir).st_mode)
    smode = stat.S_IMODE(os.stat(env.sock).st_mode)
    if dmode != 0o700:
        raise Fail("socket directory mode %o, want 700" % dmode)
    if smode != 0o600:
        raise Fail("socket mode %o, want 600" % smode)
    # 1. modes as created: the filesystem stops the other uid
    os.chmod(env.dir, 0o711)   # the test's own temp dir: let nobody reach rundir
    rc, txt = as_nobody(hello_refused(env.sock))
    if rc != 10:
        raise Fail("unprivileged child reached a 0700 socket directory (rc %d: %s)" % (rc, txt))
    # 2. modes opened by hand: the daemon's peer-credential check refuses, with a reason
    os.chmod(rundir, 0o755)
    os.chmod(env.sock, 0o666)
    rc, reply = as_nobody(hello_refused(env.sock))
    if rc != 11 or "permission denied" not in reply:
        raise Fail("unprivileged HELLO not refused by the daemon: rc %d reply %r" % (rc, reply))
    rc, msg = as_nobody(ctl_child(env, env.sock))
    # The refusal must reach the user as the daemon's reason, not a bare
    # "Broken pipe" (memdecayctl reads the daemon's ERR line even when its
    # own send fails).
    if rc != 1 or "permission denied" not in msg:
        raise Fail("unprivileged memdecayctl not refused with the daemon's reason: rc %d %r" %
                   (rc, msg))
    time.sleep(0.1)
    log = open(env.dlog).read()
    nobody = pwd.getpwnam("nobody").pw_uid
    if log.count("uid %d" % nobody) < 2 or "refused" not in log:
        raise Fail("refusals of uid %d not logged with a reason" % nobody)
    st = ctl_json(env.sock, "stats")
    if st["daemon"]["connections_refused"] < 2 or st["daemon"]["engines"] != 1:
        raise Fail("refusals not counted or engine state changed: %s" % st["daemon"])
    # 3. segments: memfds only, never a /dev/shm name
    shm_now = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    new = [n for n in shm_now - shm_before if "memdecay" in n.lower()]
    if new:
        raise Fail("segments visible under /dev/shm: %s" % new)
    seg = []
    for pid in (d.pid, lg.pid):
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if "memdecay" in t:
                seg.append((pid, fd, t))
                if not t.startswith("/memfd:memdecay-"):
                    raise Fail("segment descriptor is a named file: %s" % t)
    maps = open("/proc/%d/maps" % lg.pid).read()
    if "/memfd:memdecay-engine-" not in maps or "/memfd:memdecay-daemon-" not in maps:
        raise Fail("engine does not map memfd segments")
    if "/dev/shm" in maps:
        raise Fail("engine maps something under /dev/shm")
    # the other uid cannot open the engine's segment mapping through /proc either
    mapfiles = "/proc/%d/map_files" % lg.pid
    target = None
    for name in os.listdir(mapfiles):
        try:
            if "memfd:memdecay-engine" in os.readlink(os.path.join(mapfiles, name)):
                target = os.path.join(mapfiles, name)
                break
        except OSError:
            pass

    def open_segment():
        try:
            os.open(target, os.O_RDONLY)
            return 20, "opened"
        except PermissionError:
            return 21, "EACCES"
        except OSError as e:
            return 22, str(e)
    if target:
        rc, _ = as_nobody(open_segment)
        if rc == 20:
            raise Fail("unprivileged uid opened the engine segment through %s" % target)
    lg.terminate()
    lg.wait(10)
    print("RESULT permissions dir_mode=%o socket_mode=%o refused_connections=%d "
          "segment_fds=%d devshm_names=0" % (dmode, smode, st["daemon"]["connections_refused"],
                                              len(seg)))


main("permissions", body)
