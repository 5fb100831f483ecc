"""The HTTP/2 client's caching HPACK encoder: whatever the sequence of header lists (repeats,
changes, evictions in a small table), a standard decoder reads back exactly what was encoded,
and a repeated list costs no encoding."""

from __future__ import annotations

import random

import hpack

from scheduler.push.http2 import _CachingEncoder


def test_decoder_reads_back_every_block() -> None:
    rng = random.Random(7)
    encoder, decoder = _CachingEncoder(), hpack.Decoder()
    encoder.header_table_size = 256  # small: insertions evict
    decoder.header_table_size = 256
    base = [(b":method", b"POST"), (b":path", b"/v1/x"), (b"authorization", b"Bearer abc")]
    reused = 0
    for i in range(2000):
        headers = list(base)
        if rng.random() < 0.3:
            headers.append((b"x-n", str(rng.randrange(40)).encode()))
        if rng.random() < 0.05:
            base[2] = (b"authorization", f"Bearer {i}".encode())
        before = encoder._block
        block = encoder.encode(headers)
        reused += block is before
        decoded = decoder.decode(block, raw=True)
        assert decoded == headers, i
    assert reused > 100  # the cache is used


def test_a_pending_table_size_update_is_not_skipped() -> None:
    encoder, decoder = _CachingEncoder(), hpack.Decoder()
    headers = [(b":method", b"GET"), (b"a", b"b")]
    decoder.decode(encoder.encode(headers), raw=True)
    decoder.decode(encoder.encode(headers), raw=True)
    assert len(decoder.header_table.dynamic_entries) == 1  # ("a", "b")
    encoder.header_table_size = 0  # the next block must start with the size update
    block = encoder.encode(headers)
    assert decoder.decode(block, raw=True) == headers
    # the update reached the decoder: its table was emptied (a reused block would not say so)
    assert len(decoder.header_table.dynamic_entries) == 0
