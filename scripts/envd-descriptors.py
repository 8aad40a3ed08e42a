#!/usr/bin/env python3
"""The envd protocol's descriptors, as the E2B SDK ships them.

E2B publishes no .proto files in its packages, but its Python SDK embeds the
compiled `FileDescriptorProto` of `process/process.proto` and
`filesystem/filesystem.proto` (in `e2b/envd/*/…_pb.py`, the argument of
`file_desc(...)`). This script reads them from the installed `e2b` package and
writes them as one `FileDescriptorSet` (crates/wire/proto/envd.binpb, from
which crates/wire/build.rs generates the Rust types), or, with `--check`,
fails when the committed set differs from the installed SDK's.

    python scripts/envd-descriptors.py [--check] [OUT]
"""
import ast
import pathlib
import sys

import e2b

# `process_pb.py` in current SDKs, `process_pb2.py` in older ones.
FILES = ["envd/process/process_pb", "envd/filesystem/filesystem_pb"]


def embedded_descriptor(path: pathlib.Path) -> bytes:
    """The bytes literal given to `file_desc(...)` (new SDKs) or to
    `AddSerializedFile(...)` (older ones) in a generated module."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in ("file_desc", "AddSerializedFile") and node.args:
                value = node.args[0]
                if isinstance(value, ast.Constant) and isinstance(value.value, bytes):
                    return value.value
    raise SystemExit(f"{path}: no embedded descriptor found")


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def descriptor_set() -> bytes:
    root = pathlib.Path(e2b.__file__).parent
    # FileDescriptorSet { repeated FileDescriptorProto file = 1; }: each file
    # is field 1, length-delimited (tag 0x0a).
    return b"".join(
        b"\x0a" + varint(len(d)) + d
        for d in (
            embedded_descriptor(next(p for p in (root / f"{f}.py", root / f"{f}2.py") if p.exists()))
            for f in FILES
        )
    )


def main() -> None:
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    out = pathlib.Path(
        args[0] if args else pathlib.Path(__file__).parent.parent / "crates/wire/proto/envd.binpb"
    )
    wanted = descriptor_set()
    if check:
        if out.read_bytes() != wanted:
            raise SystemExit(
                f"{out} differs from the descriptors of the installed e2b {e2b.__version__ if hasattr(e2b, '__version__') else ''}: "
                "run scripts/envd-descriptors.py to update it"
            )
        print(f"{out}: matches the installed e2b SDK")
        return
    out.write_bytes(wanted)
    print(f"wrote {out} ({len(wanted)} bytes)")


if __name__ == "__main__":
    main()
