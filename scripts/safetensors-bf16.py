#!/usr/bin/env python3
"""Writes a safetensors file's F32 tensors as BF16 (round to nearest, ties to even), the other tensors
as they are, keeping names, shapes and metadata: how the shipped quickstart drafter was made from its
training run's model.safetensors. Python's standard library only (no torch or numpy is needed).

    scripts/safetensors-bf16.py IN.safetensors OUT.safetensors
"""
import json
import os
import struct
import sys
from array import array


def to_bf16(raw: bytes) -> bytes:
    words = array("I")
    words.frombytes(raw)
    if sys.byteorder != "little":
        words.byteswap()
    # Round to nearest even on the 16 bits dropped; the weights hold no NaN or infinity.
    half = array("H", ((w + 0x7FFF + ((w >> 16) & 1)) >> 16 for w in words))
    if sys.byteorder != "little":
        half.byteswap()
    return half.tobytes()


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    with open(source, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    body = data[8 + header_len :]
    out_header, chunks, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        start, end = info["data_offsets"]
        raw = body[start:end]
        dtype = info["dtype"]
        if dtype == "F32":
            raw, dtype = to_bf16(raw), "BF16"
        out_header[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(target + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)
    os.replace(target + ".tmp", target)


if __name__ == "__main__":
    main()
