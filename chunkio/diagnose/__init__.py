"""Diagnostics and the ``chunkio`` command: ``info``, ``verify``, ``doctor``, ``stats`` and
their reports.

:mod:`.cli` (the console script and ``python -m chunkio``), :mod:`.info_text`,
:mod:`.dataset_report` and :mod:`.foreign_report` (what ``info`` prints for chunkio and foreign
stores), :mod:`.verify_report`, :mod:`.doctor` and :mod:`.doctor_chunking` (advice on a
dataset's chunking), :mod:`.stats` (per-channel mean and std in one pass). The top of the
dependency graph: modules here may import any other chunkio package; nothing outside this
package imports it."""

from __future__ import annotations
