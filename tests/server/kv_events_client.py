"""A subscriber to a replica's KV events (vLLM's format: msgpack over ZMQ),
written from the format alone, as a router would: it rebuilds the set of
blocks the replica holds, asks the replay socket for what it missed, and
checks every event where it arrives (a stored block's hash recomputed from its
parent and tokens, its parent held; a removed block held). Used by the tests
and by bench/cluster."""
import hashlib
import threading

import msgpack
import zmq

END_SEQ = -1


def block_hash(parent, tokens):
    """chunkserve's block hash (src/kv/block_ledger.h): 63 bits of SHA-256
    over [parent present][parent, 8 bytes LE][tokens, 4 bytes LE each]."""
    data = bytes([0 if parent is None else 1]) + (parent or 0).to_bytes(8, "little")
    data += b"".join((t & 0xFFFFFFFF).to_bytes(4, "little") for t in tokens)
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big") >> 1


class KvEventSubscriber:
    """Subscribes to `endpoint` (and replays from `replay`) on a thread of
    its own. `blocks` maps hash -> (parent, tokens); `errors` lists events
    that made no sense where they arrived; `stored`/`removed` count them."""

    def __init__(self, endpoint, replay=None, topic=b""):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(endpoint)
        self.replay_endpoint = replay
        self.blocks = {}
        self.errors = []
        self.stored = self.removed = self.cleared = 0
        self.last_seq = -1
        self.replays = 0
        self.lock = threading.Lock()
        self.stopping = False
        if replay:
            self._replay(0)  # whatever happened before we connected
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def close(self):
        self.stopping = True
        self.thread.join(5)
        self.sub.close(linger=0)
        self.ctx.term()

    def snapshot(self):
        with self.lock:
            return dict(self.blocks)

    def _run(self):
        while not self.stopping:
            if not self.sub.poll(50):
                continue
            _topic, seq8, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq8, "big", signed=True)
            if seq <= self.last_seq:
                continue  # already had it from a replay
            if seq > self.last_seq + 1 and self.replay_endpoint:
                self._replay(self.last_seq + 1)  # missed some
                if seq <= self.last_seq:
                    continue
            self._apply(seq, payload)

    def _replay(self, start):
        self.replays += 1
        sock = self.ctx.socket(zmq.DEALER)
        sock.connect(self.replay_endpoint)
        try:
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            while sock.poll(5000):
                _empty, seq8, payload = sock.recv_multipart()
                seq = int.from_bytes(seq8, "big", signed=True)
                if seq == END_SEQ:
                    return
                if seq > self.last_seq:
                    self._apply(seq, payload)
            self.errors.append(f"replay from {start}: no end marker within 5 s")
        finally:
            sock.close(linger=0)

    def _apply(self, seq, payload):
        # [ts, events, data_parallel_rank], each event a map tagged by "type".
        ts, events, *_rank = msgpack.unpackb(payload, raw=False)
        with self.lock:
            if self.last_seq >= 0 and seq != self.last_seq + 1:
                self.errors.append(f"sequence {seq} after {self.last_seq}")
            self.last_seq = seq
            self.last_ts = ts
            for ev in events:
                kind = ev["type"]
                if kind == "AllBlocksCleared":
                    self.blocks.clear()
                    self.cleared += 1
                elif kind == "BlockStored":
                    self._stored(ev)
                elif kind == "BlockRemoved":
                    for h in ev["block_hashes"]:
                        if h not in self.blocks:
                            self.errors.append(f"removed {h}, not held")
                        self.blocks.pop(h, None)
                        self.removed += 1
                else:
                    self.errors.append(f"unknown event type {kind}")

    def _stored(self, ev):
        hashes, parent, tokens, size = ev["block_hashes"], ev["parent_block_hash"], ev["token_ids"], ev["block_size"]
        if len(tokens) != size * len(hashes):
            self.errors.append(f"{len(hashes)} blocks of {size} with {len(tokens)} tokens")
            return
        if parent is not None and parent not in self.blocks:
            self.errors.append(f"stored {hashes[0]} under {parent}, not held")
        for i, h in enumerate(hashes):
            toks = tokens[i * size:(i + 1) * size]
            if block_hash(parent, toks) != h:
                self.errors.append(f"block {h} does not hash from its parent and tokens")
            if h in self.blocks:
                self.errors.append(f"stored {h} twice")
            self.blocks[h] = (parent, toks)
            self.stored += 1
            parent = h
