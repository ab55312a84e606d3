"""RPC worker: answers every request on /queue/rpc at its reply-to destination (stomp.py)."""

import sys
import threading

import stomp


class Worker(stomp.ConnectionListener):
    def __init__(self, conn: stomp.Connection12) -> None:
        self.conn = conn

    def on_message(self, frame: stomp.utils.Frame) -> None:
        answer = frame.body.upper()  # the work
        self.conn.send(frame.headers["reply-to"], answer,
                       headers={"correlation-id": frame.headers["correlation-id"]})
        self.conn.ack(frame.headers["ack"])


conn = stomp.Connection12([("127.0.0.1", int(sys.argv[1]))])
conn.set_listener("", Worker(conn))
conn.connect(wait=True)
conn.subscribe("/queue/rpc", id="rpc", ack="client-individual")
print("ready", flush=True)
threading.Event().wait()  # serve until stopped
