#!/usr/bin/env python3
"""Scale-out on a Redis Cluster: how fast a fleet drains a preloaded topic.

Preloads EVENTS gift events (`rankflow produce`, keyed by sender unless
`--key event`) into one topic of PARTITIONS partitions on a tansu broker, then, for each
set-up `PxC` (P Redis primaries, one plain Redis when P is 1, and C rankflow
consumers in one group), drains the whole topic DRAINS times with a fresh
consumer group and emptied primaries each time, and prints per drain:

- events/s from the first applied event to the last (the group's join is
  before it), and from the consumers' start;
- each primary's CPU busy share over the drain, and the consumers' CPU;
- each consumer's share of the events (its partitions' share: keyed by
  sender, the Zipf-skewed senders make partitions uneven; `--key event`
  spreads them evenly with the same events).

Then the median per set-up and its ratio to the first set-up's median.
The boards are the pipeline benchmark's plain boards (`PLAIN` in
benches/support/mod.rs, those of rankflow.toml), the batch settings the
defaults. BENCHMARKS.md, "Cluster: scale-out", has the figures.

    scripts/scale_out.py --events 3000000 --partitions 24 --drains 4 \\
        --setups 1x1,1x4,3x3,6x6 [--bin DIR]

`--bin DIR` holds `rankflow`, `redis-server`, `redis-cli` and `tansu`;
otherwise they are taken from target/release, PATH and TANSU_BIN. Only the
standard library is used, so it runs where nothing can be installed.
"""

import argparse
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    """A free port below 55535: a cluster node's bus listens 10,000 above."""
    while True:
        port = random.randint(20000, 55000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def wait_port(port, what, deadline_s=30.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"scale_out: {what} does not listen on port {port}")


def cpu_seconds(pid):
    """User + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def plain_boards():
    """The PLAIN boards of the benchmarks, one source for both."""
    with open(os.path.join(ROOT, "benches/support/mod.rs")) as f:
        text = f.read()
    m = re.search(r'pub const PLAIN: &str = r#"(.*?)"#;', text, re.S)
    if not m:
        sys.exit("scale_out: PLAIN not found in benches/support/mod.rs")
    return m.group(1)


class Tools:
    def __init__(self, bin_dir):
        def find(name, fallback):
            if bin_dir:
                return os.path.join(bin_dir, name)
            return fallback or shutil.which(name) or sys.exit(f"scale_out: no {name}")

        self.rankflow = find("rankflow", os.path.join(ROOT, "target/release/rankflow"))
        self.redis_server = find("redis-server", None)
        self.redis_cli = find("redis-cli", None)
        self.tansu = find("tansu", os.environ.get("TANSU_BIN"))
        # Libraries carried beside the binaries (DIR/../lib), for the
        # servers and rankflow only: this interpreter keeps the system's.
        self.env = dict(os.environ)
        lib = os.path.join(bin_dir or "", "..", "lib")
        if bin_dir and os.path.isdir(lib):
            self.env["LD_LIBRARY_PATH"] = os.path.abspath(lib)


class Fleet:
    """Every process started, stopped at the end whatever happens."""

    def __init__(self, work, env):
        self.work = work
        self.env = env
        self.procs = []

    def spawn(self, name, args, env=None):
        log = open(os.path.join(self.work, f"{name}.log"), "ab")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                             env=env or self.env, cwd=self.work)
        self.procs.append(p)
        return p

    def stop(self, procs, sig=signal.SIGKILL):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
        for p in procs:
            p.wait()
            if p in self.procs:
                self.procs.remove(p)

    def close(self):
        self.stop(list(self.procs))


def cli(tools, port, *args):
    out = subprocess.run([tools.redis_cli, "-p", str(port), *args],
                         capture_output=True, text=True, timeout=60, env=tools.env)
    return out.stdout


def start_redis(tools, fleet, primaries, tag):
    """`primaries` redis-servers: one plain node, or a cluster of them."""
    ports, procs = [], []
    for i in range(primaries):
        port = free_port()
        args = [tools.redis_server, "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", fleet.work]
        if primaries > 1:
            args += ["--cluster-enabled", "yes", "--cluster-config-file",
                     f"nodes-{tag}-{i}.conf", "--cluster-node-timeout", "5000"]
        procs.append(fleet.spawn(f"redis-{tag}-{i}", args))
        ports.append(port)
    for port in ports:
        wait_port(port, "redis-server")
    if primaries > 1:
        out = subprocess.run(
            [tools.redis_cli, "--cluster", "create",
             *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=120, env=tools.env)
        if out.returncode != 0:
            sys.exit(f"scale_out: cluster create failed: {out.stdout}{out.stderr}")
        end = time.monotonic() + 60
        while not all("cluster_state:ok" in cli(tools, p, "CLUSTER", "INFO") for p in ports):
            if time.monotonic() > end:
                sys.exit("scale_out: the cluster did not become ok")
            time.sleep(0.1)
    return ports, procs


def metrics_total(port):
    """rankflow_events_total over every outcome: the events dealt with."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("rankflow_events_total"))


def drain(tools, fleet, config, redis_ports, redis_procs, consumers, events, tag):
    """One drain of the whole topic by `consumers` fresh consumers."""
    for p in redis_ports:
        cli(tools, p, "FLUSHALL")
    url = f"redis://127.0.0.1:{redis_ports[0]}"  # one node of a cluster is enough
    group = f"scale-{tag}-{time.time_ns()}"
    http = [free_port() for _ in range(consumers)]
    procs = []
    t_start = time.monotonic()
    for i, port in enumerate(http):
        env = dict(tools.env, RANKFLOW_KAFKA_GROUP_ID=group,
                   RANKFLOW_HTTP_LISTEN=f"127.0.0.1:{port}", RANKFLOW_REDIS_URL=url,
                   RUST_LOG="warn")
        procs.append(fleet.spawn(f"rankflow-{tag}-{i}", [tools.rankflow, "run", "-c", config],
                                 env=env))
    t_first = None
    cpu0 = None
    deadline = t_start + 600
    counts = [0.0] * consumers
    while True:
        now = time.monotonic()
        counts = [metrics_total(p) for p in http]
        done = sum(counts)
        if t_first is None and done > 0:
            t_first = now
            cpu0 = [cpu_seconds(p.pid) for p in redis_procs + procs]
        if done >= events:
            t_done = now
            break
        if any(p.poll() is not None for p in procs):
            sys.exit(f"scale_out: a consumer exited during {tag}; see {fleet.work}")
        if now > deadline:
            sys.exit(f"scale_out: {tag} did not drain in 600 s ({done:.0f} events)")
        time.sleep(0.02)
    cpu1 = [cpu_seconds(p.pid) for p in redis_procs + procs]
    fleet.stop(procs)
    span = t_done - t_first
    busy = [(b - a) / span for a, b in zip(cpu0, cpu1)]
    return {
        "rate": events / span,
        "rate_from_start": events / (t_done - t_start),
        "join_s": t_first - t_start,
        "redis_busy": busy[: len(redis_procs)],
        "consumer_cpu": busy[len(redis_procs):],
        "shares": sorted((c / max(sum(counts), 1) for c in counts), reverse=True),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--drains", type=int, default=4)
    ap.add_argument("--setups", default="1x1,1x4,3x3,6x6")
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--receivers", type=int, default=1_000)
    ap.add_argument("--skew", type=float, default=1.1,
                    help="the producer's Zipf exponent (its default: 1.1)")
    ap.add_argument("--key", default="user", choices=["user", "event"],
                    help="what the producer keys messages by (its default: user)")
    ap.add_argument("--bin")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    a = ap.parse_args()
    tools = Tools(a.bin)
    setups = [tuple(int(x) for x in s.split("x")) for s in a.setups.split(",")]
    work = tempfile.mkdtemp(prefix="rankflow-scale.")
    fleet = Fleet(work, tools.env)
    try:
        run(a, tools, fleet, setups)
    finally:
        fleet.close()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(a, tools, fleet, setups):
    kafka = free_port()
    url = f"tcp://127.0.0.1:{kafka}"
    fleet.spawn("tansu", [tools.tansu, "broker", "--listener-url", url,
                          "--advertised-listener-url", url])
    wait_port(kafka, "tansu")
    subprocess.run([tools.tansu, "topic", "create", "events", "--partitions",
                    str(a.partitions), "--broker", url], check=True, capture_output=True,
                   env=tools.env)
    config = os.path.join(fleet.work, "rankflow.toml")
    with open(config, "w") as f:
        f.write(f"""[kafka]
brokers = "127.0.0.1:{kafka}"
group_id = "scale-out"
topics = ["events"]
[kafka.client]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
"heartbeat.interval.ms" = "500"
[redis]
url = "redis://127.0.0.1:1"
[http]
listen = "127.0.0.1:0"
{plain_boards()}""")
    t = time.monotonic()
    # `--key` only when asked: a rankflow from before it existed can run too.
    key = ["--key", a.key] if a.key != "user" else []
    subprocess.run([tools.rankflow, "produce", "-c", config, "--events", str(a.events),
                    "--rate", "0", "--members", str(a.members), "--receivers",
                    str(a.receivers), "--skew", str(a.skew), *key, "--types", "gift"],
                   check=True, capture_output=True, env=tools.env)
    print(f"preloaded {a.events:,} gift events (skew {a.skew}, keyed by {a.key}) in "
          f"{a.partitions} partitions in "
          f"{time.monotonic() - t:.1f} s; {os.cpu_count()} cores", flush=True)
    print("| set-up | drain | events/s | from start | join s | Redis busy per primary "
          "| consumers' CPU | consumers' shares of the events |", flush=True)
    print("|---|---:|---:|---:|---:|---|---|---|", flush=True)
    medians = []
    for n, (primaries, consumers) in enumerate(setups):
        tag = f"{primaries}x{consumers}"
        ports, procs = start_redis(tools, fleet, primaries, tag)
        rates = []
        for d in range(a.drains):
            r = drain(tools, fleet, config, ports, procs, consumers, a.events, f"{tag}-{d}")
            rates.append(r["rate"])
            pct = lambda xs: " ".join(f"{x * 100:.0f}%" for x in xs)
            print(f"| {primaries} Redis + {consumers} consumers | {d + 1} | {r['rate']:,.0f} "
                  f"| {r['rate_from_start']:,.0f} | {r['join_s']:.1f} | {pct(r['redis_busy'])} "
                  f"| {pct(r['consumer_cpu'])} | {pct(r['shares'])} |", flush=True)
        fleet.stop(procs)
        medians.append((tag, statistics.median(rates)))
    base = medians[0][1]
    print("\n| set-up | median events/s | × the first set-up |\n|---|---:|---:|")
    for tag, m in medians:
        print(f"| {tag} | {m:,.0f} | {m / base:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
