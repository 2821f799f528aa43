"""What :func:`chunkio.diagnose.dataset_report.verify` finds: problems, never-written chunks,
notes."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ChunkAt", "MissingChunks", "Problem", "VerifyReport"]

#: a chunk: its number along the sample axis, or its coordinates in the chunk grid
ChunkAt = int | tuple[int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: where (array, chunk) and what."""

    message: str
    array: str | None = None
    chunk: ChunkAt | None = None

    def __str__(self) -> str:
        where = "" if self.array is None else f"array {self.array!r}"
        if self.chunk is not None:
            where += f", chunk {self.chunk}"
        return f"{where}: {self.message}" if where else self.message


@dataclass(frozen=True)
class MissingChunks:
    """Chunks of a Zarr or HDF5 array chunkio did not write that were never written: they read
    as the array's fill value, which is valid data there (information, not a problem)."""

    array: str
    count: int
    total: int
    #: the first few, by grid coordinates
    first: tuple[tuple[int, ...], ...]

    def __str__(self) -> str:
        shown = ", ".join(map(str, self.first)) + (", ..." if self.count > len(self.first) else "")
        return (
            f"array {self.array!r}: {self.count} of {self.total} chunks never written (they "
            f"read as the fill value): {shown}"
        )


@dataclass
class VerifyReport:
    """The outcome of :func:`verify`: ``ok`` when no problem was found. ``missing`` and
    ``notes`` are information (never-written chunks of a foreign store, arrays not read)."""

    path: str
    arrays: int = 0
    chunks: int = 0
    problems: list[Problem] = field(default_factory=list)
    missing: list[MissingChunks] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = f"{self.path}: {self.arrays} arrays, {self.chunks} chunks read"
        lines = [f"{head}: OK" if self.ok else f"{head}: {len(self.problems)} problem(s)"]
        lines += [f"  - {p}" for p in self.problems]
        lines += [f"  missing: {m}" for m in self.missing]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)
