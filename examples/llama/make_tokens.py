"""Writes an llm.c token file (256 little-endian int32 header: magic 20240520, version 1, count; then
uint16 tokens) whose tokens are the bytes of the given text files, for examples/llama (vocabulary 256).
Usage: make_tokens.py OUT TEXT [TEXT...]"""
import os
import struct
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
data = b"".join(open(path, "rb").read() for path in sys.argv[2:])
header = struct.pack("<3i", 20240520, 1, len(data)) + bytes(4 * 253)
os.makedirs(os.path.dirname(os.path.abspath(sys.argv[1])), exist_ok=True)
with open(sys.argv[1], "wb") as f:
    f.write(header + struct.pack(f"<{len(data)}H", *data))
print(f"{sys.argv[1]}: {len(data)} tokens")
