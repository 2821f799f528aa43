"""Run documentation pages as a reader would: ``python doc_runner.py PLAN.json RESULTS.json``.

The plan is a list of pages, each ``{"page", "dir", "env", "blocks": [{"lang", "code",
"line"}]}``. A page's blocks run in order in its directory: Python blocks in one namespace of
their own (a page is a recipe: later blocks use earlier names), shell blocks by ``bash -e``
as a terminal would run them (the ``chunkio`` command from ``PATH``). One page failing does
not stop the next; the results say, per page, ``ok``, the failing block's line, the error and
the seconds taken. Pages share this interpreter only to save its start-up (a few seconds each
on a loaded machine): imports are cached, names and working directory are not shared.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import traceback
from typing import Any


def run_page(page: dict[str, Any]) -> dict[str, Any]:
    start, cpu = time.monotonic(), _cpu()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(page["env"])
    os.chdir(page["dir"])
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    result: dict[str, Any] = {"page": page["page"], "ok": True}
    try:
        for block in page["blocks"]:
            where = f"{page['page']}:{block['line']}"
            result["line"] = block["line"]
            began = time.monotonic()
            if block["lang"] == "python":
                exec(compile(block["code"], where, "exec"), namespace)
                result.setdefault("blocks", []).append([block["line"], _since(began)])
                continue
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block["code"]],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode:
                raise RuntimeError(
                    f"{where}: the shell block exited {done.returncode}:\n{block['code']}\n"
                    f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
                )
            result.setdefault("blocks", []).append([block["line"], _since(began)])
    except BaseException:  # a recipe's SystemExit or KeyboardInterrupt is a failure too
        result.update(ok=False, error=traceback.format_exc()[-6000:])
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    result["seconds"], result["cpu"] = _since(start), round(_cpu() - cpu, 2)
    return result


def _since(start: float) -> float:
    return round(time.monotonic() - start, 2)


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (worker processes, commands):
    on a loaded machine the recipes' cost, where the wall time is mostly waiting."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(plan_path: str, results_path: str) -> int:
    with open(plan_path) as f:
        plan = json.load(f)
    results = []
    for page in plan:
        results.append(run_page(page))
        with open(results_path, "w") as f:  # written after each page: a timeout keeps them
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
