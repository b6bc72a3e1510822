#!/usr/bin/env python3
"""Measure a change of the apply script (src/sink/lua/) on the calls a real
run made, without timing noise.

Timings on the shared benchmark machines move by a third between runs of the
same binary, more than most changes to the script are worth. This tool takes
time out of it: it records every command a pipeline benchmark run sends to
Redis (MONITOR), replays them in order into a fresh Redis with the apply
script built from a directory of your choice, and counts the instructions
redis-server executes for them under valgrind's callgrind, which repeat to
within 1% run to run. It also checks that two scripts leave the same data.

  scripts/apply_replay.py capture OUT        # knobs as for the pipeline bench:
      BENCH_WORKLOADS=plain BENCH_OPS= BENCH_BATCHES=2000/20 BENCH_EVENTS=100000 \\
      BENCH_SEED_EVENTS=0 scripts/apply_replay.py capture /tmp/plain-2000.mon
  scripts/apply_replay.py count OUT DIR...   # instructions per script directory
  scripts/apply_replay.py replay OUT DIR     # one timed replay, and a digest of
                                             # every key it leaves
  scripts/apply_replay.py prelude [DIR]      # what every call pays before its
                                             # first instance: the script's
                                             # function definitions

APPLY_REPLAY_REDIS_ARGS="--name value ..." starts the replay's Redis with
those settings (e.g. "--hash-max-listpack-entries 64
--zset-max-listpack-entries 64": BENCHMARKS.md, "Redis's listpack limits");
`replay` also prints the sum of MEMORY USAGE of every key it leaves.

A DIR holds composite.lua, state.lua, move.lua and apply.lua (copy
src/sink/lua and edit); "src" means src/sink/lua. Only the apply script is
swapped: the calls' arguments are replayed as recorded, so a change of the
argument layout (src/sink/encode.rs) needs a new capture. Needs redis-server,
redis-cli, valgrind (apt) and the redis Python package (pip).
"""
import hashlib
import os
import re
import socket
import subprocess
import sys
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ["composite", "state", "move", "apply"]
SKIP = {b"INFO", b"PING", b"MONITOR", b"CONFIG", b"SLOWLOG", b"CLIENT"}


def lua_dir(d):
    return os.path.join(ROOT, "src/sink/lua") if d == "src" else d


def apply_source(d):
    return b"".join(open(os.path.join(lua_dir(d), p + ".lua"), "rb").read() for p in PARTS)


def unescape(s):
    """MONITOR quotes arguments as sdscatrepr does."""
    esc = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}
    out, i = bytearray(), 0
    while i < len(s):
        if s[i : i + 1] == b"\\":
            n = s[i + 1 : i + 2]
            if n == b"x":
                out.append(int(s[i + 2 : i + 4], 16))
                i += 4
                continue
            out += esc.get(n, n)
            i += 2
            continue
        out.append(s[i])
        i += 1
    return bytes(out)


def read_capture(path):
    """The capture's top-level commands (not those scripts made), in order."""
    tok = re.compile(rb'"((?:[^"\\]|\\.)*)"')
    cmds = []
    with open(path, "rb") as f:
        for line in f:
            if b"[0 lua]" in line or not line[:1].isdigit():
                continue
            args = [unescape(m) for m in tok.findall(line)]
            if args and args[0].upper() not in SKIP:
                cmds.append(args)
    return cmds


def replay(r, cmds, src):
    """Replays into r from empty; returns the apply calls made."""
    r.flushall()
    r.script_flush()
    shas, apply_sha = {}, None
    for a in cmds:
        if a[0].upper() == b"SCRIPT" and a[1].upper() == b"LOAD":
            # The apply script starts with the prelude (composite.lua).
            body = src if a[2].startswith(b"-- rankflow Lua prelude") else a[2]
            new = r.script_load(body).encode()
            shas[hashlib.sha1(a[2]).hexdigest().encode()] = new
            if body is src:
                apply_sha = new
    calls, pipe = 0, r.pipeline(transaction=False)

    def send():
        for x in pipe.execute(raise_on_error=False):
            if isinstance(x, Exception):
                sys.exit(f"apply_replay: a replayed command failed: {x}")

    for a in cmds:
        if a[0].upper() == b"SCRIPT":
            continue
        if a[0].upper() == b"EVALSHA":
            a = [a[0], shas.get(a[1].lower(), a[1])] + a[2:]
            calls += a[1] == apply_sha
        pipe.execute_command(*a)
        if len(pipe) >= 64:
            send()
    send()
    return calls


def digest(r):
    h = hashlib.sha1()
    for k in sorted(r.keys("*")):
        t = r.type(k)
        h.update(k + t)
        if t == b"zset":
            h.update(repr(r.zrange(k, 0, -1, withscores=True)).encode())
        elif t == b"hash":
            h.update(repr(sorted(r.hgetall(k).items())).encode())
        elif t == b"string":
            h.update(r.get(k))
    return h.hexdigest()[:16], r.dbsize()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port, prefix=()):
    p = subprocess.Popen(
        [*prefix, "redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         *os.environ.get("APPLY_REPLAY_REDIS_ARGS", "").split()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    r = redis.Redis(port=port)
    for _ in range(600):
        try:
            r.ping()
            return p, r
        except redis.ConnectionError:
            time.sleep(0.1)
    sys.exit("apply_replay: redis-server did not start")


def cmd_capture(out):
    exe = subprocess.run(
        ["cargo", "bench", "--locked", "--bench", "pipeline", "--no-run"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stderr
    exe = re.findall(r"Executable .*\((.*)\)", exe)[-1]
    env = dict(os.environ)
    if "TANSU_BIN" not in env:
        setup = subprocess.run([os.path.join(ROOT, "scripts/setup.sh")], capture_output=True, text=True, check=True)
        env["TANSU_BIN"] = setup.stdout.strip().splitlines()[-1]
    bench = subprocess.Popen([os.path.join(ROOT, exe), "--bench"], cwd=ROOT, env=env,
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    monitor = None
    for line in bench.stderr:
        m = re.search(r"redis pid (\d+)", line)
        if m and monitor is None:
            # redis-server retitles itself "redis-server 127.0.0.1:<port>".
            title = open(f"/proc/{m.group(1)}/cmdline", "rb").read().decode(errors="replace")
            port = re.search(r":(\d+)", title).group(1)
            with open(out, "wb") as sink:
                monitor = subprocess.Popen(["redis-cli", "-p", port, "monitor"], stdout=sink,
                                           stderr=subprocess.DEVNULL)
        if "events in" in line or "events/s" in line:
            print(line.rstrip())
    bench.wait()
    if monitor:
        monitor.terminate()
    print(f"{out}: {len(read_capture(out))} commands")


def cmd_count(capture, dirs):
    cmds = read_capture(capture)
    port = free_port()
    out = f"/tmp/apply_replay.{port}.cg"
    proc, r = start_redis(port, ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p"))
    first = None
    try:
        for d in dirs:
            src = apply_source(d)
            replay(r, cmds, src)  # the same state before every counted run
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
            calls = replay(r, cmds, src)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
            dumps = sorted((f for f in os.listdir("/tmp") if f.startswith(os.path.basename(out))),
                           key=lambda f: os.path.getmtime(os.path.join("/tmp", f)))
            text = open(os.path.join("/tmp", dumps[-1])).read()
            ir = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
            for f in dumps:
                os.remove(os.path.join("/tmp", f))
            first = first or ir
            dig, keys = digest(r)
            print(f"{d}: {ir:,} instructions for {calls} apply calls ({ir / first:.3f}x the first); "
                  f"data {dig}, {keys} keys")
    finally:
        proc.terminate()


def cmd_replay(capture, d):
    cmds = read_capture(capture)
    port = free_port()
    proc, r = start_redis(port)
    try:
        src = apply_source(d)
        replay(r, cmds, src)
        r.config_resetstat()
        calls = replay(r, cmds, src)
        usec = r.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)
        dig, keys = digest(r)
        memory = sum(r.memory_usage(k, samples=0) or 0 for k in r.scan_iter(count=1000))
        print(f"{d}: evalsha {usec / 1e6:.3f} s for {calls} apply calls; data {dig}, {keys} keys, "
              f"{memory:,} bytes (MEMORY USAGE)")
    finally:
        proc.terminate()


def cmd_prelude(d):
    """Redis's time per call of the apply script returning at once, and
    returning right after the definitions of composite.lua, state.lua and
    move.lua (each call runs the whole chunk, so defines its functions
    again), for a call of plain and period views and for one that needs
    state.lua's extras: medians of 7 alternating rounds of 50,000
    pipelined calls."""
    port = free_port()
    proc, r = start_redis(port)
    stop = b'if ARGV[1] == "prelude" then return 0 end\n'
    parts = [open(os.path.join(lua_dir(d), p + ".lua"), "rb").read() for p in PARTS]
    at_once = r.script_load(stop + b"".join(parts))
    after = r.script_load(b"".join(parts[:3]) + stop + parts[3])
    # (script, ARGV after "prelude"): a call of plain and period views, and
    # one with a window or composite instance ("x<n>", state.lua's extras).
    variants = {
        "returning at once": (at_once, ["0", "1"]),
        "after the definitions, plain and period views": (after, ["0", "1"]),
        "after the definitions, windows or composite": (after, ["0", "x1"]),
    }
    try:
        took = {k: [] for k in variants}
        for _ in range(7):
            for k, (sha, argv) in variants.items():
                pipe = r.pipeline(transaction=False)
                for _ in range(50_000):
                    pipe.evalsha(sha, 1, "k", "prelude", *argv)
                r.config_resetstat()
                pipe.execute()
                took[k].append(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
        for k, v in took.items():
            v.sort()
            print(f"{d}: {k}: {v[3]:.2f} µs per call (of {v[0]:.2f}–{v[-1]:.2f})")
    finally:
        proc.terminate()


def main():
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "capture":
        cmd_capture(a[1])
    elif len(a) >= 3 and a[0] == "count":
        cmd_count(a[1], a[2:])
    elif len(a) == 3 and a[0] == "replay":
        cmd_replay(a[1], a[2])
    elif len(a) <= 2 and a and a[0] == "prelude":
        cmd_prelude(a[1] if len(a) == 2 else "src")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
