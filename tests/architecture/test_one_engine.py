"""One Zarr read engine and one codec table: a second of either fails here.

* Chunk bytes are decoded (``ChunkFiles.decode_bytes``) only by the engine
  (``backends/zarr/engine.py``); HDF5 raw chunks decode through the same table's decoders.
* Compressor libraries are called, and codec names or HDF5 filter ids mapped, only in
  ``backends/codec_table.py``.
Each rule is shown to catch what it guards by a planted violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "chunkio"
CODEC_TABLE = PACKAGE / "backends" / "codec_table.py"
ENGINE = PACKAGE / "backends" / "zarr" / "engine.py"

#: compressor APIs: calling one outside the codec table is a second codec table
_COMPRESSOR_MODULES = {
    "numcodecs",
    "hdf5plugin",
    "zlib",
    "deflate",
    "isal",
    "zlib_ng",
    "lz4",
    "zstandard",
    "blosc",
}
#: names and HDF5 filter ids of compressors: a dict keyed by them is a codec table
_CODEC_KEYS = {"zstd", "blosc", "gzip", "lz4", "deflate", 1, 32001, 32004, 32015}
#: uses of those modules that are not codecs: PNG chunk CRCs, Blosc's thread count
_NOT_CODECS = {("zlib", "crc32"), ("blosc", "set_nthreads")}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def decoders_of_chunk_bytes(tree: ast.AST) -> list[int]:
    """Lines that decode stored chunk bytes themselves."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "decode_bytes"
    ]


def codec_tables(tree: ast.AST) -> list[int]:
    """Lines that call a compressor library or build a mapping keyed by codec names/ids."""
    found = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                root = a.name.split(".")[0]
                if root in _COMPRESSOR_MODULES:
                    aliases[a.asname or root] = root
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root in _COMPRESSOR_MODULES:
                for a in node.names:
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module is not None and (module, node.attr) not in _NOT_CODECS:
                found.append(node.lineno)
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if len(keys & _CODEC_KEYS) >= 2:
                found.append(node.lineno)
    return found


def test_only_the_engine_decodes_zarr_chunk_bytes() -> None:
    others = {
        str(p.relative_to(PACKAGE)): lines
        for p in _modules()
        if p != ENGINE and (lines := decoders_of_chunk_bytes(ast.parse(p.read_text())))
    }
    assert others == {}, f"a second Zarr read engine decodes chunks at {others}"


def test_only_the_codec_table_knows_compressors() -> None:
    others = {
        str(p.relative_to(PACKAGE)): lines
        for p in _modules()
        if p != CODEC_TABLE and (lines := codec_tables(ast.parse(p.read_text())))
    }
    assert others == {}, f"codec knowledge outside backends/codec_table.py at {others}"


def test_the_rules_catch_what_they_guard() -> None:
    engine = "def read(files, data, out):\n    files.decode_bytes(data, out, where='x')\n"
    assert decoders_of_chunk_bytes(ast.parse(engine)) == [2]
    table = "import numcodecs\nDEC = {'zstd': 1, 'gzip': 2}\nf = numcodecs.Zstd(3).decode\n"
    assert codec_tables(ast.parse(table)) == [2, 3]
    hdf5 = "FILTERS = {32001: 'blosc', 32015: 'zstd'}\n"
    assert codec_tables(ast.parse(hdf5)) == [1]
    fine = (
        "import zlib\nok = zlib.crc32(b'x')\nfrom numcodecs import blosc\nblosc.set_nthreads(1)\n"
    )
    assert codec_tables(ast.parse(fine)) == []
    assert codec_tables(ast.parse(CODEC_TABLE.read_text()))  # the table itself is found
