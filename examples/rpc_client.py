"""RPC client: each request carries reply-to /temp-queue/replies; answers come back there (stomp.py)."""

import queue
import sys
import uuid

import stomp


class Replies(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.inbox: queue.Queue[stomp.utils.Frame] = queue.Queue()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.inbox.put(frame)


conn = stomp.Connection12([("127.0.0.1", int(sys.argv[1]))])
replies = Replies()
conn.set_listener("", replies)
conn.connect(wait=True)
conn.subscribe("/temp-queue/replies", id="replies")  # private to this connection
for word in sys.argv[2:]:
    request_id = str(uuid.uuid4())
    conn.send("/queue/rpc", word, headers={"reply-to": "/temp-queue/replies", "correlation-id": request_id})
    answer = replies.inbox.get(timeout=10)
    assert answer.headers["correlation-id"] == request_id
    print(word, "->", answer.body, flush=True)
conn.disconnect()  # the temporary queue goes with the connection
