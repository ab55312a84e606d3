"""CPU per message through the server's frame path: real ``Connection`` objects in one process.

A producer's server side reads SENDs to ``/queue/q`` (2,000 per write), the engine delivers them
to a consumer's server side, whose client reads them (and ACKs each read's worth with
``--ack client-individual``).  Both server sides are ``server/connection.py`` on loopback TCP
sockets, so the path is the production one for plain TCP: the fd reads, the parser, the engine,
the write batch and its ``write(2)``; a memory store keeps the store out of it.  It prints this
process's CPU per message (``time.process_time``; the client sides are in it too, the same
code in every tree) and the wall-clock rate.

The socket benchmarks (``sitting.py``) measure a broker process whose rate, on a shared
machine, swings with whatever else runs; this figure is CPU work, so it compares two trees of
the server (a change against its parent) in interleaved runs with a small spread::

  for tree in ../old .; do PYTHONPATH=$tree python -m benchmarks.frame_path --messages 200000; done
"""

from __future__ import annotations

import argparse
import socket
import time

import trio

from stompmq.broker import Broker, BrokerConfig
from stompmq.protocol import Frame, FrameParser, encode_frame
from stompmq.server.connection import Connection
from stompmq.server.heartbeats import HeartBeats
from stompmq.server.parking import Parking
from stompmq.server.runtime import Runtime
from stompmq.server.settings import ServerSettings
from stompmq.storage.memory import MemoryStore

#: SENDs per producer write: a pipelining producer's reads carry thousands of frames.
PER_WRITE = 2000


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of one loopback TCP connection (server side, client side), non-blocking."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    server.setblocking(False)
    client.setblocking(False)
    return server, client


async def connect(stream: trio.SocketStream, parser: FrameParser) -> None:
    await stream.send_all(encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "/"}), "1.2"))
    frames: list[Frame] = []
    while not frames:
        frames = parser.feed(await stream.receive_some(65536))
    assert frames[0].command == "CONNECTED", frames


async def measure(messages: int, ack: str, body_size: int) -> tuple[float, float]:
    """CPU seconds per message and messages per wall-clock second, for ``messages`` delivered."""
    runtime = Runtime(Broker(MemoryStore(), BrokerConfig()), None)
    await runtime.open()
    settings = ServerSettings(port=0)
    parking = Parking()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            heart_beats = HeartBeats()
            await nursery.start(heart_beats.run)
            await nursery.start(parking.run)
            clients = []
            for _ in range(2):
                server, client = tcp_pair()
                stream = trio.SocketStream(trio.socket.from_stdlib_socket(server))
                nursery.start_soon(Connection(stream, runtime, settings, heart_beats=heart_beats, parking=parking).run)
                clients.append(trio.SocketStream(trio.socket.from_stdlib_socket(client)))
            producer, consumer = clients
            parser = FrameParser()
            await connect(producer, FrameParser())
            await connect(consumer, parser)
            subscribe = Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "ack": ack})
            await consumer.send_all(encode_frame(subscribe, "1.2"))
            send = encode_frame(Frame("SEND", {"destination": "/queue/q"}, b"x" * body_size), "1.2")

            async def produce() -> None:
                left = messages
                while left > 0:
                    await producer.send_all(send * min(left, PER_WRITE))
                    left -= PER_WRITE

            received = 0
            wall, cpu = time.perf_counter(), time.process_time()
            nursery.start_soon(produce)
            while received < messages:
                frames = parser.feed(await consumer.receive_some(1 << 20))
                received += len(frames)
                if ack != "auto" and frames:
                    await consumer.send_all(b"".join(
                        encode_frame(Frame("ACK", {"id": frame.headers["ack"]}), "1.2") for frame in frames))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            nursery.cancel_scope.cancel()
    finally:
        parking.close()
        with trio.CancelScope(shield=True):
            await runtime.close()
    return cpu / messages, messages / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--ack", default="auto", choices=["auto", "client-individual"])
    parser.add_argument("--body-size", type=int, default=100)
    args = parser.parse_args()
    cpu, rate = trio.run(measure, args.messages, args.ack, args.body_size)
    print(f"frame_path ack={args.ack} messages={args.messages} cpu_us_per_msg={cpu * 1e6:.3f} rate={rate:,.0f} msg/s")


if __name__ == "__main__":
    main()
