"""Pure parts of the GCS transfer layer: crc32c combination and the composite-upload plan."""

from __future__ import annotations

import itertools

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from jupyter_gkeresume.snapshot import checksum
from jupyter_gkeresume.snapshot.composite import MAX_COMPONENTS, plan_parts
from jupyter_gkeresume.snapshot.gcs_upload import GCS_CHUNK_QUANTUM, slice_views


@given(st.binary(max_size=3000), st.binary(max_size=3000), st.integers(0, 2**32 - 1))
def test_combine_is_the_crc_of_the_concatenation(a, b, seed):
    start = crc32c.crc32c(b"x", seed & 0xFFFF)  # any prefix state
    left = crc32c.crc32c(a, start)
    assert checksum.combine(left, crc32c.crc32c(b), len(b)) == crc32c.crc32c(a + b, start)


@given(st.integers(0, 2**32 - 1))
def test_base64_round_trip(crc):
    assert checksum.from_base64(checksum.to_base64(crc)) == crc


def test_base64_rejects_malformed():
    assert checksum.from_base64(None) is None
    assert checksum.from_base64("not base64!") is None
    assert checksum.from_base64("AAAA") is None  # three bytes


@given(st.integers(1, 5 * 2**40), st.integers(1, 512).map(lambda n: n * GCS_CHUNK_QUANTUM))
def test_plan_covers_the_blob_in_at_most_32_quantum_aligned_parts(size, part_bytes):
    ranges = plan_parts(size, part_bytes)
    assert 1 <= len(ranges) <= MAX_COMPONENTS
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all((end - start) % GCS_CHUNK_QUANTUM == 0 for start, end in ranges[:-1])
    assert all(end - start >= min(part_bytes, size) for start, end in ranges[:-1])


@given(st.lists(st.binary(max_size=50), max_size=6), st.data())
def test_slice_views_is_a_slice_of_the_concatenation(chunks, data):
    whole = b"".join(chunks)
    start = data.draw(st.integers(0, len(whole)))
    end = data.draw(st.integers(start, len(whole)))
    views = [memoryview(c) for c in chunks]
    assert b"".join(bytes(v) for v in slice_views(views, start, end)) == whole[start:end]
