"""STOMP broker load generator (stdlib only).

Targets any STOMP 1.0/1.1/1.2 broker (stompmq, RabbitMQ's STOMP plugin, ActiveMQ, ...)
over raw TCP sockets with pre-built frames.  Producer and consumer(s) run in separate OS
processes (multiprocessing, fork) so that the generator itself is cheap and never the
bottleneck: frames are batched many per ``sendall`` and incoming frames are parsed
incrementally from large ``recv`` chunks using ``content-length``.

Scenarios (``--scenario``):

  queue      1 producer -> 1 queue -> 1 consumer, auto ack, no receipts, producer sends as
             fast as TCP allows.  Reports msg/s at the consumer (first to last message
             received, after the warm-up) and the producer's send rate.
             --producers N / --consumers M: N producers share --count, M consumers share
             the queue (the rate counts all of them).
  queue-ack  like queue, but the consumer subscribes with ack:client-individual and
             --prefetch N (sent as `prefetch`, `activemq.prefetchSize` and
             `prefetch-count`) and ACKs every message (ACKs batched per recv chunk).
  receipts   every SEND carries a receipt; at most --window un-receipted SENDs are
             outstanding.  The consumer uses --ack (default client-individual) and
             --prefetch (default 1000).  Reports msg/s at the consumer and producer.
  fanout     1 producer -> /topic/... -> --subscribers consumers (each SUBSCRIBE is
             confirmed by a receipt before publishing starts).  Reports deliveries/s
             summed over subscribers, per-subscriber counts and losses.
  latency    publish at a fixed --rate for --duration seconds on a monotonic schedule (sleep,
             then spin the last --spin-us); each body carries its send timestamp
             (CLOCK_MONOTONIC, system-wide on Linux); reports publish-to-deliver latency
             p50/p90/p99/p99.9/max in ms, and the producer's lateness against its schedule
             (pace_p99_us, pace_max_us).  benchmarks/latency.py runs it over a list of rates.
  drain      pre-load --count messages (persistent, with receipts, --window outstanding),
             optionally --pause seconds (restart the broker meanwhile: the consumer
             retries its connection until --timeout), then drain with one consumer
             (auto ack, or --ack client-individual with --prefetch) and report msg/s.
  exchange   stompmq only: 1 producer -> consistent-hash exchange over --exchange-queues
             queues (routing keys cycled over --keys) -> 1 consumer subscribed to all of them
  groups     1 producer -> 1 queue -> --subscribers competing consumers (ack:client-individual,
             --prefetch, default 1000); messages cycle JMSXGroupID over --groups groups (0: no
             header, the plain-queue baseline).  Reports msg/s over all consumers and counts
             messages seen out of order within a group (must be 0).

  append     producer only: --count SENDs with receipts (--window outstanding) and no consumer;
             reports the receipted rate.  With --destination-prefix /stream/bench- it appends to
             a stream, which docs/benchmarks.md compares with the same run on a queue.
  idle       open --connections-idle N connections (CONNECT / CONNECTED), hold them for
             --duration seconds, close them; prints how many were opened.  With
             --broker-pid the broker's RSS is sampled before, while holding and after.

Result fields: rate (consumer side: messages after the warm-up divided by the time from the
last warm-up message to the last message; fanout: deliveries summed over subscribers per
second; latency: achieved publish rate), producer_rate (SENDs handed to the kernel per
second; with plain SENDs this includes TCP buffering), producer_ingest_rate (until the
broker's RECEIPT for the producer's DISCONNECT, i.e. until it has read every SEND),
broker_cpu_s / broker_cpu_pct / broker_cpu_us_per_msg (with --broker-pid: utime+stime of
the broker process during the run; broker_main_thread_cpu_s: of its main thread alone),
loadgen_cpu_s (CPU used by this script's workers).

Output: one summary line per run (``scenario=queue msgs=100000 rate=NNNNN msg/s ...``),
plus a JSON line with --json.  An ERROR frame from the broker is printed and the script
exits non-zero (exit status 1); a timeout or a connection failure also exits 1.  Every
socket operation has a timeout (--timeout), so a stuck broker never hangs the script.

Examples:

  python -m benchmarks.load --scenario queue                                   # stompmq on :61613
  python -m benchmarks.load --port 61614 --login guest --passcode guest --scenario receipts --persistent
  python -m benchmarks.load --port 61616 --scenario fanout --subscribers 10 --broker-pid auto
  python -m benchmarks.load --scenario latency --rate 1000 --duration 10
  python -m benchmarks.load --scenario drain --count 200000 --pause 30        # restart broker in the pause
  python -m benchmarks.load --scenario idle --connections-idle 1000 --duration 20 --broker-pid auto
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import multiprocessing as mp
import os
import queue as queue_mod
import resource
import select
import sys
import time

from benchmarks.proc import cpu_seconds
from benchmarks.stompload import BrokerError, Client, LoadError, build_frame, header_value


def connect(args, want_body: bool = False, retry_until: float | None = None) -> Client:
    """A connection as the command line asks for (address, credentials, version, transport, timeout)."""
    return Client(
        args.host, args.port, login=args.login, passcode=args.passcode, vhost=args.vhost, version=args.stomp_version,
        timeout=args.timeout, want_body=want_body, tls=args.tls, tls_ca=args.tls_ca, ws=args.ws, retry_until=retry_until,
    )


# ----------------------------------------------------------------------------- helpers


def parse_headers(items) -> list[tuple[str, str]]:
    out = []
    for it in items or ():
        if ":" not in it:
            raise SystemExit(f"bad header {it!r}: expected NAME:VALUE")
        k, v = it.split(":", 1)
        out.append((k, v))
    return out


def set_affinity(cpus):
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as e:
            print(f"warning: sched_setaffinity({cpus}) failed: {e}", file=sys.stderr)


def make_body(size: int, seq: int | None = None, ts: int | None = None) -> bytes:
    """Body of exactly ``size`` bytes; optional sequence number / timestamp prefix."""
    prefix = b""
    if seq is not None:
        prefix += b"%010d " % seq
    if ts is not None:
        prefix += b"%019d " % ts
    if len(prefix) > size:
        return prefix
    return prefix + b"x" * (size - len(prefix))


def set_timer_slack_ns(ns: int) -> None:
    """Let this process's sleeps end within ``ns`` of their due time (Linux adds 50 µs of slack
    to every timer by default); elsewhere a no-op."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, ns, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def pace_until(due_ns: int, spin_ns: float) -> None:
    """Return at ``due_ns`` (time.monotonic_ns): sleep until ``spin_ns`` before it, then spin.
    Sleeping alone wakes tens of µs late on a busy machine; spinning alone takes a whole core
    from the broker on a small one."""
    left = due_ns - time.monotonic_ns() - spin_ns
    if left > 0:
        time.sleep(left / 1e9)
    while time.monotonic_ns() < due_ns:
        pass


def send_prefix(args, dest: str) -> bytes:
    hs = [("destination", dest), ("content-type", "application/octet-stream")]
    if args.persistent:
        hs.append(("persistent", "true"))
    hs += parse_headers(args.send_header)
    return ("SEND\n" + "".join(f"{k}:{v}\n" for k, v in hs)).encode()


def ack_frame_builder(version: str, sub_id: str):
    """Returns f(header_block) -> ACK frame bytes for the negotiated version."""
    sub = sub_id.encode()
    if version == "1.2":

        def f(hdr):
            v = header_value(hdr, b"ack") or header_value(hdr, b"message-id")
            return b"ACK\nid:" + v + b"\n\n\0"

    elif version == "1.1":

        def f(hdr):
            return b"ACK\nsubscription:" + sub + b"\nmessage-id:" + header_value(hdr, b"message-id") + b"\n\n\0"

    else:

        def f(hdr):
            return b"ACK\nmessage-id:" + header_value(hdr, b"message-id") + b"\n\n\0"

    return f


# ----------------------------------------------------------------------------- broker stats


def find_listener_pid(host: str, port: int) -> int | None:
    """PID of the local process listening on host:port (via /proc/net/tcp*)."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as fh:
                next(fh)
                for line in fh:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            pass
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                        return int(pid)
                except OSError:
                    continue
        except OSError:
            continue
    return None


class BrokerStats:
    def __init__(self, pid: int | None):
        self.pid = pid

    def cpu(self, thread: bool = False) -> float | None:
        """utime+stime of the broker process (``thread``: of its main thread only, whose share
        says how much of the work the other threads, e.g. a store's, took off it)."""
        if not self.pid:
            return None
        try:
            return cpu_seconds(self.pid, thread=self.pid if thread else None)
        except (OSError, IndexError, ValueError):
            return None

    def rss_kb(self) -> int | None:
        if not self.pid:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None


def resolve_broker_pid(args) -> int | None:
    if args.broker_pid is None:
        return None
    if args.broker_pid == "auto":
        pid = find_listener_pid(args.host, args.port)
        if pid is None:
            print(f"warning: no local process found listening on port {args.port}", file=sys.stderr)
        return pid
    return int(args.broker_pid)


# ----------------------------------------------------------------------------- workers


def run_worker(target, result_q, *a):
    """Process entry point: runs target, puts a result dict (or an error) on result_q."""
    try:
        res = target(*a)
        result_q.put(res)
    except BrokerError as e:
        result_q.put({"error": str(e), "broker_error": True})
    except LoadError as e:
        result_q.put({"error": str(e)})
    except TimeoutError:
        result_q.put({"error": "socket timeout"})
    except Exception as e:  # noqa: BLE001 - report anything
        result_q.put({"error": f"{type(e).__name__}: {e}"})


def producer(args, dest: str, go, done, mode: str, total: int, warmup: int):
    """mode: 'plain' (fire and forget), 'receipts' (windowed receipts), 'seq' (plain with
    sequence numbers in the body), 'paced' (fixed --rate with timestamps)."""
    set_affinity(args.affinity)
    conn = connect(args)
    prefix = send_prefix(args, dest)
    if not go.wait(args.timeout):
        conn.close()
        raise LoadError("producer: timed out waiting for the consumers to be ready")
    res = {"role": "producer"}
    batch = args.batch
    if mode in ("plain", "seq", "keys", "groups"):
        if mode == "keys":
            # an exchange: cycle the routing key over --keys values so every bound queue gets traffic
            body = make_body(args.body_size)
            tail = b"content-length:%d\n\n" % len(body) + body + b"\0"
            def frame_for(k: int) -> bytes:
                return send_prefix(args, f"{dest}/{k % args.keys}") + tail

            if args.keys <= batch:
                full = b"".join(frame_for(k) for k in range(batch))
            else:
                full = b""  # more keys than a batch: build every batch (in this process, off the broker's core)

            def chunks(lo, hi):
                k = lo
                while k + batch <= hi:
                    yield full or b"".join(frame_for(j) for j in range(k, k + batch))
                    k += batch
                if k < hi:
                    yield b"".join(frame_for(j) for j in range(k, hi))

        elif mode == "plain":
            body = make_body(args.body_size)
            frame = prefix + b"content-length:%d\n\n" % len(body) + body + b"\0"
            full = frame * batch

            def chunks(lo, hi):
                k = lo
                while k + batch <= hi:
                    yield full
                    k += batch
                if k < hi:
                    yield frame * (hi - k)

        else:  # seq, groups: the body carries the sequence number; groups add JMSXGroupID
            frames = []
            for i in range(total):
                body = make_body(args.body_size, seq=i)
                group = b"JMSXGroupID:g%d\n" % (i % args.groups) if mode == "groups" and args.groups else b""
                frames.append(prefix + group + b"content-length:%d\n\n" % len(body) + body + b"\0")

            def chunks(lo, hi):
                for k in range(lo, hi, batch):
                    yield b"".join(frames[k : min(k + batch, hi)])

        t_start = time.monotonic()
        for c in chunks(0, warmup):
            conn.send(c)
        t0 = time.monotonic()
        for c in chunks(warmup, total):
            conn.send(c)
        t1 = time.monotonic()
        conn.disconnect()  # the DISCONNECT receipt comes after the broker read every SEND
        t2 = time.monotonic()
        measured = total - warmup
        res.update(
            sent=total,
            rate=measured / (t1 - t0) if t1 > t0 else float("inf"),
            ingest_rate=measured / (t2 - t0) if t2 > t0 else float("inf"),
            send_s=t1 - t_start,
            disconnect_receipt_s=t2 - t1,
        )
    elif mode == "receipts":
        body = make_body(args.body_size)
        pre = prefix + b"content-length:%d\nreceipt:" % len(body)
        post = b"\n\n" + body + b"\0"
        window = args.window
        sent = receipted = 0
        t0 = None
        t_start = time.monotonic()
        if warmup == 0:
            t0 = t_start
        sock = conn.sock
        reader = conn.reader
        while receipted < total:
            outstanding = sent - receipted
            if sent < total and outstanding < window:
                n = min(batch, window - outstanding, total - sent)
                conn.send(b"".join(pre + b"%d" % i + post for i in range(sent, sent + n)))
                sent += n
                # non-blocking poll for receipts
                r, _, _ = select.select([sock], [], [], 0)
                if not r:
                    continue
            sock.settimeout(args.timeout)
            try:
                frames = reader.read()
            except TimeoutError:
                raise LoadError(
                    f"producer: timeout ({args.timeout:g}s) waiting for receipts "
                    f"({receipted}/{total} receipted)"
                ) from None
            for f in frames:
                if f[0] == b"RECEIPT":
                    receipted += 1
            if t0 is None and receipted >= warmup:
                t0 = time.monotonic()
        t1 = time.monotonic()
        conn.disconnect()
        res.update(sent=sent, receipted=receipted, send_s=t1 - t_start,
                   rate=(total - warmup) / (t1 - t0) if t1 > t0 else float("inf"))
    elif mode == "paced":
        # a monotonic schedule (message i is due at t_start + i/rate), not "sleep one period":
        # lateness never accumulates.  Waits sleep to within --spin-us of the due time and spin
        # the rest (``pace_until``); messages found due together go out in one write.  Each body
        # carries the instant it was written; the lateness against the schedule is reported
        # (pace_p99_us, pace_max_us) so a run whose producer fell behind shows it.
        set_timer_slack_ns(1000)
        period = 1e9 / args.rate
        spin_ns = min(args.spin_us * 1000, period / 4)  # spin at most a quarter of each period
        t_start = time.monotonic_ns()
        sent = 0
        bs = args.body_size
        cl = b"content-length:%d\n\n" % max(bs, 31)
        lag_max = 0
        late: list[int] = []
        while sent < total:
            now = time.monotonic_ns()
            due = min(total, int((now - t_start) / period) + 1)
            if due > sent:
                lag_max = max(lag_max, due - sent)
                parts = []
                for i in range(sent, due):
                    ts = time.monotonic_ns()
                    late.append(ts - t_start - int(i * period))
                    parts.append(prefix + cl + make_body(bs, seq=i, ts=ts) + b"\0")
                conn.send(b"".join(parts))
                sent = due
            else:
                pace_until(t_start + int(sent * period), spin_ns)
        t1 = time.monotonic_ns()
        conn.disconnect()
        late.sort()
        res.update(sent=sent, send_s=(t1 - t_start) / 1e9, rate=sent / ((t1 - t_start) / 1e9),
                   max_backlog=lag_max, pace_p99_us=round(pct(late, 99) / 1e3, 1),
                   pace_max_us=round(late[-1] / 1e3, 1))
    done.set()
    return res


def consumer(args, dest: str, idx: int, ready_q, done, mode: str, total: int, warmup: int,
             ack: str, prefetch, retry_until=None, shared=None):
    """mode: 'count' (stop after total), 'seq' (fanout: stop on total or producer done +
    --settle idle), 'latency' (bodies carry timestamps), 'shared' (competing consumers of one
    queue that check the order within each of --groups groups).  ``shared`` (several consumers
    of one queue): a (counter, finished event) pair; they stop once all of them together
    received ``total``."""
    set_affinity(args.affinity)
    want_body = mode in ("seq", "latency", "shared")
    sub_id = str(idx)
    while True:
        try:
            conn = connect(args, want_body=want_body, retry_until=retry_until)
            for j, one in enumerate(dest.split(",")):  # several queues: one subscription each
                conn.subscribe(one, sub_id if j == 0 else f"{sub_id}-{j}", ack, prefetch,
                               parse_headers(args.sub_header))
            break
        except LoadError:
            # e.g. a broker that is still starting up after a restart (drain --pause)
            if retry_until is None or time.monotonic() >= retry_until:
                raise
            time.sleep(0.5)
    ready_q.put(("ready", idx))
    acker = ack_frame_builder(conn.version, sub_id) if ack != "auto" else None
    sock, reader = conn.sock, conn.reader
    received = 0
    t_first = t0 = t_last = None
    measured = 0
    lat = []
    seen_max = -1
    out_of_order = 0
    short_to = min(0.5, args.timeout)
    sock.settimeout(short_to)
    last_data = time.monotonic()
    group_last: dict[int, int] = {}  # shared: the last seq seen per group
    while (received < total) if shared is None else not shared[1].is_set():
        try:
            frames = reader.read()
        except TimeoutError:
            now = time.monotonic()
            if shared is not None:
                last_data = now  # another consumer may be the one receiving
                continue
            if mode != "count" and done.is_set() and now - last_data >= args.settle:
                break
            if now - last_data >= args.timeout:
                raise LoadError(
                    f"consumer {idx}: no message for {args.timeout:g}s "
                    f"(received {received}/{total})"
                ) from None
            continue
        now = time.monotonic()
        now_ns = reader.recv_ns  # before the chunk was parsed
        last_data = now
        acks = []
        for cmd, hdr, body in frames:
            if cmd != b"MESSAGE":
                continue
            received += 1
            if acker is not None:
                acks.append(acker(hdr))
            if mode == "count":
                if received == warmup or (warmup == 0 and received == 1):
                    t0 = now
                continue
            seq = int(body[:10])
            if mode == "shared":
                group = seq % args.groups if args.groups else 0
                if args.groups and group_last.get(group, -1) > seq:
                    out_of_order += 1
                group_last[group] = seq
                if seq >= warmup:
                    if t0 is None:
                        t0 = now
                    measured += 1
                continue
            if seq < seen_max:
                out_of_order += 1
            seen_max = max(seen_max, seq)
            if seq >= warmup:
                if t0 is None:
                    t0 = now
                measured += 1
                if mode == "latency":
                    lat.append(now_ns - int(body[11:30]))
        if t_first is None and received:
            t_first = now
        if received:
            t_last = now
        if acks:
            conn.send(b"".join(acks))
            sock.settimeout(short_to)  # send() left the long timeout on the socket
        if shared is not None and frames:
            counter, finished = shared
            with counter.get_lock():
                counter.value += sum(1 for f in frames if f[0] == b"MESSAGE")
                if counter.value >= total:
                    finished.set()
    if mode == "count":
        measured = (received - warmup if warmup else received - 1) if t0 is not None else 0
    conn.disconnect()
    res = {
        "role": "consumer",
        "idx": idx,
        "received": received,
        "measured": measured,
        "t_first": t_first,
        "t0": t0,
        "t_last": t_last,
        "out_of_order": out_of_order,
        "version": conn.version,
    }
    if mode == "latency":
        res["lat_ns"] = lat
    return res


# ----------------------------------------------------------------------------- orchestration


class Runner:
    def __init__(self, args):
        self.args = args
        self.ctx = mp.get_context("fork")
        self.result_q = self.ctx.Queue()
        self.ready_q = self.ctx.Queue()
        self.procs = []
        self._early: list = []

    def start(self, target, *a):
        p = self.ctx.Process(target=run_worker, args=(target, self.result_q) + a, daemon=True)
        p.start()
        self.procs.append(p)
        return p

    def fail(self, msg: str, broker: bool = False):
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(2)
        raise (BrokerError if broker else LoadError)(msg)

    def wait_ready(self, n: int):
        deadline = time.monotonic() + self.args.timeout + 5
        got = 0
        while got < n:
            try:
                self.ready_q.get(timeout=0.2)
                got += 1
                continue
            except queue_mod.Empty:
                pass
            self._check_results_early()
            if time.monotonic() > deadline:
                self.fail(f"only {got}/{n} consumers subscribed within {self.args.timeout:g}s")

    def _check_results_early(self):
        try:
            r = self.result_q.get_nowait()
        except queue_mod.Empty:
            return
        if "error" in r:
            self.fail(r["error"], r.get("broker_error", False))
        self._early.append(r)

    def collect(self, n: int) -> list[dict]:
        results = list(self._early)
        self._early = []
        while len(results) < n:
            try:
                r = self.result_q.get(timeout=0.5)
            except queue_mod.Empty:
                dead = [p for p in self.procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    self.fail(f"worker process died with exit code {dead[0].exitcode}")
                if all(not p.is_alive() for p in self.procs):
                    # give the queue feeder a last chance
                    try:
                        r = self.result_q.get(timeout=2)
                    except queue_mod.Empty:
                        self.fail("workers exited without reporting results")
                else:
                    continue
            if "error" in r:
                self.fail(r["error"], r.get("broker_error", False))
            results.append(r)
        for p in self.procs:
            p.join(5)
        return results


def unique_dest(args, scenario: str, topic: bool = False) -> str:
    if args.destination:
        return args.destination
    prefix = args.topic_prefix if topic else args.destination_prefix
    return f"{prefix}{scenario}-{os.getpid()}-{time.time_ns() // 1_000_000 % 10**9}"


def declare_exchange(args) -> tuple[str, str]:
    """stompmq only: declare a consistent-hash exchange over --exchange-queues fresh queues.
    Returns the producer's destination prefix and the consumer's comma-separated queues."""
    name = f"bench-{os.getpid()}-{time.time_ns() // 1_000_000 % 10**9}"
    queues = [f"/queue/{name}-q{i}" for i in range(args.exchange_queues)]
    conn = connect(args)
    frames = [build_frame("SEND", [("destination", f"/control/declare/exchange/{name}"),
                                   ("type", "consistent-hash")])]
    frames += [build_frame("SEND", [("destination", f"/control/bind/exchange/{name}"),
                                    ("queue", q), ("weight", "1")]) for q in queues]
    conn.send(b"".join(frames))
    conn.disconnect()  # its receipt follows every control frame
    return f"/exchange/{name}", ",".join(queues)


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def add_broker_cpu(out: dict, cpu0: float | None, cpu1: float | None, wall_s: float) -> float | None:
    """Put the broker's CPU over a run into ``out`` (only with --broker-pid) and return it."""
    if cpu0 is None or cpu1 is None:
        return None
    cpu = cpu1 - cpu0
    out["broker_cpu_s"] = round(cpu, 2)
    out["broker_cpu_pct"] = round(100 * cpu / wall_s, 1)
    return cpu


def run_throughput(args, stats: BrokerStats) -> dict:
    sc = args.scenario
    warmup = args.warmup
    total = args.count + warmup
    subs = args.subscribers if sc == "fanout" else 1
    if sc == "queue":
        ack = args.ack or "auto"
        pmode = "plain"
    elif sc == "queue-ack":
        ack = args.ack or "client-individual"
        pmode = "plain"
    elif sc == "receipts":
        ack = args.ack or "client-individual"
        pmode = "receipts"
    elif sc == "fanout":
        ack = args.ack or "auto"
        pmode = "seq"
    elif sc == "exchange":
        ack = args.ack or "auto"
        pmode = "keys"
    elif sc == "groups":
        ack = args.ack or "client-individual"
        pmode = "groups"
        subs = args.subscribers
    else:  # latency
        ack = args.ack or "auto"
        pmode = "paced"
        total = int(args.rate * args.duration)
        warmup = min(args.warmup, total // 10) if args.warmup else 0
    prefetch = args.prefetch
    if prefetch is None and ack != "auto":
        prefetch = 1000
    dest = unique_dest(args, sc, topic=(sc == "fanout"))
    consumer_dest = dest
    if sc == "exchange":
        dest, consumer_dest = declare_exchange(args)
    cmode = {"fanout": "seq", "latency": "latency", "groups": "shared"}.get(sc, "count")
    if sc == "latency":
        cmode = "latency"
    R = Runner(args)
    go = R.ctx.Event()
    done = R.ctx.Event()
    nprod = ncons = 1
    shared = None
    consumer_warmup = warmup
    if sc in ("queue", "queue-ack"):
        nprod, ncons = args.producers, args.consumers
        subs = ncons
        consumer_warmup = warmup // ncons
        if ncons > 1:
            shared = (R.ctx.Value("q", 0), R.ctx.Event())
    elif sc == "groups":  # competing consumers; the body's sequence numbers say what is warm-up
        shared = (R.ctx.Value("q", 0), R.ctx.Event())
    for i in range(subs):
        R.start(consumer, args, consumer_dest, i, R.ready_q, done, cmode, total, consumer_warmup, ack, prefetch,
                None, shared)
    R.wait_ready(subs)
    for i in range(nprod):  # each sends its share, the first one the remainder too
        share, wshare = total // nprod, warmup // nprod
        if i == 0:
            share, wshare = total - share * (nprod - 1), warmup - wshare * (nprod - 1)
        R.start(producer, args, dest, go, done, pmode, share, wshare)
    cpu0, main0, w0 = stats.cpu(), stats.cpu(thread=True), time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    go.set()
    results = R.collect(subs + nprod)
    cpu1, main1, w1 = stats.cpu(), stats.cpu(thread=True), time.monotonic()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    prods = [r for r in results if r["role"] == "producer"]
    prod = prods[0]
    if nprod > 1:
        prod = {**prod, "rate": sum(p["rate"] for p in prods)}
        if all("ingest_rate" in p for p in prods):
            prod["ingest_rate"] = sum(p["ingest_rate"] for p in prods)
    cons = sorted((r for r in results if r["role"] == "consumer"), key=lambda r: r["idx"])
    out = {
        "scenario": sc,
        "destination": dest,
        "msgs": args.count if sc != "latency" else prod["sent"],
        "body_size": args.body_size,
        "warmup": warmup,
        "ack": ack,
        "prefetch": prefetch,
        "persistent": args.persistent,
        "stomp_version": cons[0]["version"],
        "producer_rate": round(prod["rate"], 1),
    }
    if "ingest_rate" in prod:
        out["producer_ingest_rate"] = round(prod["ingest_rate"], 1)
    if sc == "exchange":
        out["exchange_queues"] = args.exchange_queues
    if sc in ("queue", "queue-ack") and ncons * nprod > 1:
        t0s = [c["t0"] for c in cons if c["t0"] is not None]
        tls = [c["t_last"] for c in cons if c["t_last"] is not None]
        el = max(tls) - min(t0s) if t0s and tls else 0
        out["producers"], out["consumers"] = nprod, ncons
        out["rate"] = round(sum(c["measured"] for c in cons) / el, 1) if el > 0 else None
        out["consumer_elapsed_s"] = round(el, 3)
        out["received"] = sum(c["received"] for c in cons)
    elif sc in ("queue", "queue-ack", "receipts", "exchange"):
        c = cons[0]
        el = (c["t_last"] - c["t0"]) if c["t0"] is not None else 0
        out["rate"] = round(c["measured"] / el, 1) if el > 0 else None
        out["consumer_elapsed_s"] = round(el, 3)
        out["received"] = c["received"]
        if sc == "receipts":
            out["window"] = args.window
    elif sc in ("fanout", "groups"):  # several consumers: from the first one's start to the last one's end
        t0s = [c["t0"] for c in cons if c["t0"] is not None]
        tls = [c["t_last"] for c in cons if c["t_last"] is not None]
        el = max(tls) - min(t0s) if t0s and tls else 0
        measured = sum(c["measured"] for c in cons)
        out["subscribers"] = subs
        out["rate"] = round(measured / el, 1) if el > 0 else None
        if sc == "fanout":
            out["rate_unit"] = "deliveries/s"
            out["deliveries"] = measured
            out["lost"] = subs * total - sum(c["received"] for c in cons)
        else:
            out["groups"] = args.groups
            out["received"] = sum(c["received"] for c in cons)
        out["per_subscriber"] = [c["received"] for c in cons]
        out["out_of_order"] = sum(c["out_of_order"] for c in cons)
        out["elapsed_s"] = round(el, 3)
    else:  # latency
        c = cons[0]
        lat = sorted(c["lat_ns"])
        out["target_rate"] = args.rate
        out["duration_s"] = args.duration
        out["received"] = c["received"]
        out["lost"] = prod["sent"] - c["received"]
        out["samples"] = len(lat)
        for name, p in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9), ("max", 100)):
            v = pct(lat, p)
            out[f"{name}_ms"] = round(v / 1e6, 3) if v is not None else None
        out["rate"] = round(prod["rate"], 1)
        out["pace_p99_us"], out["pace_max_us"] = prod["pace_p99_us"], prod["pace_max_us"]
    cpu = add_broker_cpu(out, cpu0, cpu1, w1 - w0)
    if cpu is not None:
        n_msgs = out.get("deliveries") or out["msgs"]
        out["broker_cpu_us_per_msg"] = round(1e6 * cpu / n_msgs, 1)
        if main0 is not None and main1 is not None:
            out["broker_main_thread_cpu_s"] = round(main1 - main0, 2)
    out["loadgen_cpu_s"] = round(
        (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 2)
    out["wall_s"] = round(w1 - w0, 3)
    return out


def receipted_producer(args, dest: str, total: int, warmup: int) -> tuple[dict, float]:
    """One producer sending ``total`` SENDs with receipts; its result and the wall time."""
    R = Runner(args)
    go, done = R.ctx.Event(), R.ctx.Event()
    R.start(producer, args, dest, go, done, "receipts", total, warmup)
    go.set()
    t = time.monotonic()
    prod = R.collect(1)[0]
    return prod, time.monotonic() - t


def run_append(args, stats: BrokerStats) -> dict:
    dest = unique_dest(args, "append")
    cpu0, w0 = stats.cpu(), time.monotonic()
    prod, elapsed = receipted_producer(args, dest, args.count + args.warmup, args.warmup)
    cpu1, w1 = stats.cpu(), time.monotonic()
    out = {
        "scenario": "append",
        "destination": dest,
        "msgs": args.count,
        "body_size": args.body_size,
        "warmup": args.warmup,
        "rate": round(prod["rate"], 1),
        "receipted": prod["receipted"],
        "elapsed_s": round(elapsed, 3),
    }
    add_broker_cpu(out, cpu0, cpu1, w1 - w0)
    return out


def run_drain(args, stats: BrokerStats) -> dict:
    warmup = args.warmup
    total = args.count + warmup
    dest = unique_dest(args, "drain")
    ack = args.ack or "auto"
    prefetch = args.prefetch
    if prefetch is None and ack != "auto":
        prefetch = 1000
    persistent_was = args.persistent
    args.persistent = True
    prod, load_s = receipted_producer(args, dest, total, 0)  # phase 1: preload with receipts
    print(f"drain: pre-loaded {prod['receipted']} persistent messages into {dest} "
          f"in {load_s:.2f}s ({prod['rate']:.0f} msg/s)", file=sys.stderr, flush=True)
    retry_until = None
    if args.pause:
        print(f"drain: pausing {args.pause:g}s (restart the broker now if you want)",
              file=sys.stderr, flush=True)
        time.sleep(args.pause)
        retry_until = time.monotonic() + args.timeout
        if args.broker_pid == "auto":
            stats.pid = None  # the broker may have been restarted: look it up again later
    # phase 2: drain
    R2 = Runner(args)
    done2 = R2.ctx.Event()
    done2.set()
    R2.start(consumer, args, dest, 0, R2.ready_q, done2, "count", total, warmup, ack, prefetch,
             retry_until)
    R2.wait_ready(1)
    if args.broker_pid == "auto" and stats.pid is None:
        stats.pid = find_listener_pid(args.host, args.port)
    cpu0, w0 = stats.cpu(), time.monotonic()
    c = R2.collect(1)[0]
    cpu1, w1 = stats.cpu(), time.monotonic()
    args.persistent = persistent_was
    el = (c["t_last"] - c["t0"]) if c["t0"] is not None else 0
    out = {
        "scenario": "drain",
        "destination": dest,
        "msgs": args.count,
        "body_size": args.body_size,
        "warmup": warmup,
        "ack": ack,
        "prefetch": prefetch,
        "stomp_version": c["version"],
        "rate": round(c["measured"] / el, 1) if el > 0 else None,
        "preload_rate": round(prod["rate"], 1),
        "preload_s": round(load_s, 3),
        "paused_s": args.pause,
        "received": c["received"],
        "consumer_elapsed_s": round(el, 3),
    }
    add_broker_cpu(out, cpu0, cpu1, w1 - w0)
    return out


def run_idle(args, stats: BrokerStats) -> dict:
    n = args.connections_idle
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 64
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
        except (ValueError, OSError):
            pass
    rss0 = stats.rss_kb()
    conns = []
    error = None
    t0 = time.monotonic()
    try:
        for _ in range(n):
            conns.append(connect(args))
    except LoadError as e:
        error = str(e)
    t_open = time.monotonic() - t0
    print(f"idle: opened {len(conns)}/{n} connections in {t_open:.2f}s; holding for "
          f"{args.duration:g}s" + (f" (broker pid {stats.pid})" if stats.pid else ""),
          file=sys.stderr, flush=True)
    if error:
        print(f"idle: stopped opening connections: {error}", file=sys.stderr, flush=True)
    time.sleep(min(1.0, args.duration))
    rss1 = stats.rss_kb()
    time.sleep(max(0.0, args.duration - 1.0))
    rss_hold_end = stats.rss_kb()
    for c in conns:
        c.close()  # plain TCP close; DISCONNECT round trips would take as long as opening
    time.sleep(1.0)
    rss2 = stats.rss_kb()
    out = {
        "scenario": "idle",
        "requested": n,
        "opened": len(conns),
        "open_s": round(t_open, 3),
        "held_s": args.duration,
    }
    if rss0 is not None:
        out.update(rss_before_kb=rss0, rss_held_kb=max(rss1 or 0, rss_hold_end or 0),
                   rss_after_kb=rss2)
        if rss1 and conns:
            out["rss_per_conn_kb"] = round((out["rss_held_kb"] - rss0) / len(conns), 1)
    if error:
        out["error"] = error
    return out


def summary_line(res: dict) -> str:
    keys = [k for k in res if k not in ("per_subscriber", "destination")]
    parts = []
    for k in keys:
        v = res[k]
        if k == "rate":
            unit = res.get("rate_unit", "msg/s")
            parts.append(f"rate={v:.0f} {unit}" if isinstance(v, (int, float)) else f"rate={v}")
        elif k == "rate_unit":
            continue
        elif isinstance(v, float):
            parts.append(f"{k}={v:g}")
        else:
            parts.append(f"{k}={v}")
    if "per_subscriber" in res:
        parts.append("per_subscriber=" + ",".join(str(x) for x in res["per_subscriber"]))
    if res.get("destination"):
        parts.append(f"destination={res['destination']}")
    return " ".join(parts)


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("broker")
    g.add_argument("--host", default="127.0.0.1", help="broker host (default %(default)s)")
    g.add_argument("--port", type=int, default=61613, help="broker STOMP port (default %(default)s)")
    g.add_argument("--login", default=None, help="CONNECT login header (RabbitMQ: guest)")
    g.add_argument("--passcode", default=None, help="CONNECT passcode header (RabbitMQ: guest)")
    g.add_argument("--tls", action="store_true",
                   help="connect over TLS (stompmq --tls-port / --wss-port); unverified without --tls-ca")
    g.add_argument("--tls-ca", default=None, metavar="FILE", help="verify the broker's certificate against this CA")
    g.add_argument("--ws", action="store_true",
                   help="STOMP over WebSocket (ws://HOST:PORT/ws; wss:// with --tls), one binary message per write")
    g.add_argument("--vhost", default="/",
                   help="CONNECT host header, RabbitMQ's virtual host (default %(default)s)")
    g.add_argument("--stomp-version", choices=["1.0", "1.1", "1.2"], default="1.2",
                   help="highest STOMP version offered in accept-version (default %(default)s); "
                        "ACK frames follow the version the broker negotiates")
    g.add_argument("--timeout", type=float, default=30.0,
                   help="timeout in seconds of every socket operation / wait for a frame; a "
                        "consumer that sees no message for this long fails (default %(default)s)")
    g.add_argument("--broker-pid", default=None, metavar="PID|auto",
                   help="broker process to sample (CPU time utime+stime during the run, RSS for "
                        "idle) from /proc; 'auto' = the local process listening on --port")

    g = p.add_argument_group("workload")
    g.add_argument("--scenario", default="queue",
                   choices=["queue", "queue-ack", "receipts", "fanout", "latency", "drain", "idle", "groups",
                            "exchange", "append"],
                   help="what to measure (see above; default %(default)s)")
    g.add_argument("--exchange-queues", type=int, default=10,
                   help="exchange scenario (stompmq only): queues bound to the consistent-hash "
                        "exchange, all consumed by one connection (default %(default)s)")
    g.add_argument("--groups", type=int, default=1000,
                   help="groups scenario: messages cycle JMSXGroupID over this many groups (0: no header,"
                        " a plain queue with competing consumers) (default %(default)s)")
    g.add_argument("--keys", type=int, default=1000,
                   help="exchange scenario: distinct routing keys cycled by the producer "
                        "(default %(default)s)")
    g.add_argument("--count", type=int, default=100000,
                   help="measured messages (default %(default)s); not used by latency/idle")
    g.add_argument("--warmup", type=int, default=1000,
                   help="extra messages sent first and excluded from the timing (default "
                        "%(default)s); for latency, that many first samples are dropped (at most "
                        "10%% of the run)")
    g.add_argument("--body-size", type=int, default=100,
                   help="message body size in bytes (default %(default)s; latency needs >= 31 and "
                        "pads smaller sizes up)")
    g.add_argument("--persistent", action="store_true",
                   help="add persistent:true to SENDs (needed for durable queues in "
                        "RabbitMQ/ActiveMQ); drain always sends persistent messages")
    g.add_argument("--destination-prefix", default="/queue/bench-",
                   help="queue name prefix; the scenario, pid and a time stamp are appended so "
                        "every run uses a fresh queue (default %(default)s)")
    g.add_argument("--topic-prefix", default="/topic/bench-",
                   help="topic name prefix used by fanout (default %(default)s)")
    g.add_argument("--destination", default=None,
                   help="use exactly this destination instead of a generated unique one")
    g.add_argument("--ack", choices=["auto", "client", "client-individual"], default=None,
                   help="consumer ack mode (default: auto for queue/fanout/latency/drain, "
                        "client-individual for queue-ack/receipts); every message is ACKed, "
                        "ACKs of one recv chunk are sent in one write")
    g.add_argument("--prefetch", type=int, default=None,
                   help="consumer prefetch, sent as `prefetch`, `activemq.prefetchSize` and "
                        "`prefetch-count` (default: 1000 with client acks, not sent with auto ack)")
    g.add_argument("--window", type=int, default=1000,
                   help="max un-receipted SENDs outstanding in receipts and the drain pre-load "
                        "(default %(default)s)")
    g.add_argument("--producers", type=int, default=1,
                   help="queue, queue-ack: producers sharing --count (default %(default)s)")
    g.add_argument("--consumers", type=int, default=1,
                   help="queue, queue-ack: consumers of the one queue (default %(default)s)")
    g.add_argument("--subscribers", type=int, default=10,
                   help="fanout: number of topic subscribers (default %(default)s)")
    g.add_argument("--rate", type=float, default=1000,
                   help="latency: messages per second (default %(default)s)")
    g.add_argument("--spin-us", type=float, default=50,
                   help="latency: the producer spins (rather than sleeps) this last part of each wait, "
                        "at most a quarter of the period (default %(default)s)")
    g.add_argument("--duration", type=float, default=10,
                   help="latency: seconds of publishing; idle: seconds to hold the connections "
                        "(default %(default)s)")
    g.add_argument("--pause", type=float, default=0,
                   help="drain: seconds to wait between pre-load and drain, e.g. to restart the "
                        "broker (the consumer then retries connecting for --timeout s)")
    g.add_argument("--connections-idle", type=int, default=1000, metavar="N",
                   help="idle: number of connections to open (default %(default)s)")
    g.add_argument("--settle", type=float, default=2.0,
                   help="fanout/latency: once the producer is done, a subscriber that has seen "
                        "no message for this many seconds stops (lost messages) "
                        "(default %(default)s)")
    g.add_argument("--send-header", action="append", metavar="NAME:VALUE",
                   help="extra header on every SEND (repeatable)")
    g.add_argument("--sub-header", action="append", metavar="NAME:VALUE",
                   help="extra header on every SUBSCRIBE (repeatable)")

    g = p.add_argument_group("load generator")
    g.add_argument("--batch", type=int, default=100,
                   help="frames per sendall (default %(default)s)")
    g.add_argument("--affinity", default=None, metavar="CPUS",
                   help="pin the producer/consumer processes to these CPUs, e.g. '1' or '0,1' "
                        "(pin the broker elsewhere with taskset)")
    g.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    g.add_argument("--repeat", type=int, default=1,
                   help="run the scenario this many times (fresh destination each time) and "
                        "also print the median rate (default %(default)s)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.affinity is not None:
        try:
            args.affinity = {int(x) for x in args.affinity.split(",") if x != ""}
        except ValueError:
            print("--affinity expects a comma separated CPU list", file=sys.stderr)
            return 2
    if args.count < 1 or args.batch < 1 or args.window < 1 or args.subscribers < 1:
        print("--count, --batch, --window and --subscribers must be >= 1", file=sys.stderr)
        return 2
    if args.warmup < 0:
        print("--warmup must be >= 0", file=sys.stderr)
        return 2
    if args.scenario == "latency" and args.body_size < 31:
        args.body_size = 31
    rates = []
    for _ in range(args.repeat):
        stats = BrokerStats(resolve_broker_pid(args))
        try:
            if args.scenario == "drain":
                res = run_drain(args, stats)
            elif args.scenario == "idle":
                res = run_idle(args, stats)
            elif args.scenario == "append":
                res = run_append(args, stats)
            else:
                res = run_throughput(args, stats)
        except BrokerError as e:
            print(f"bench: broker sent {e}", file=sys.stderr)
            return 1
        except LoadError as e:
            print(f"bench: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        print(summary_line(res), flush=True)
        if args.json:
            print(json.dumps(res), flush=True)
        if res.get("rate") is not None:
            rates.append(res["rate"])
        if args.scenario == "idle" and res.get("error"):
            return 1
    if args.repeat > 1 and rates:
        rates.sort()
        med = rates[len(rates) // 2] if len(rates) % 2 else (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2
        print(f"scenario={args.scenario} runs={len(rates)} median_rate={med:.0f} "
              f"rates={','.join(f'{r:.0f}' for r in rates)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
