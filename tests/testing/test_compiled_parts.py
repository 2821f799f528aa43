"""The compiled parts cannot go stale or missing silently (chunkio.testing.compiled, setup.py):
a C source that does not compile leaves no earlier build behind; a missing, stale or outdated
part fails ``make check-extensions`` under CI (naming what to install) and warns elsewhere;
every test run ends with a line saying whether they are built and what skipped without them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from chunkio.testing import compiled
from chunkio.testing.compiled import PARTS, CompiledPart, problems
from chunkio.testing.servers import unavailable

ROOT = Path(__file__).resolve().parents[2]
JPEG, YUV, FLETCHER, SPARSE_ROWS = PARTS


def _env(**set_: str) -> dict[str, str]:
    """This process's environment without CI's switches, plus ``set_``."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CHUNKIO_REQUIRE_EXTENSIONS")}
    return {**env, **set_}


def _source(part: CompiledPart) -> Path:
    """The C file ``part`` is built from, relative to the checkout."""
    return Path(*part.module.split(".")).with_suffix(".c")


def _built(tree: Path) -> list[str]:
    return sorted(p.name.split(".")[0] for p in tree.rglob("*.so"))


@pytest.mark.timeout(300)
def test_a_c_source_that_does_not_compile_leaves_no_earlier_build(tmp_path: Path) -> None:
    """setup.py's build of a copy of the C sources: built once, then each source broken. The
    build still succeeds (``optional=True``: pip installs go on) but leaves neither module, in
    the source tree or the build folder, where the stock ``build_ext`` kept the last good ones."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        unavailable("no C compiler to build chunkio's extensions with")
    shutil.copy(ROOT / "setup.py", tmp_path)
    for part in PARTS:
        (tmp_path / _source(part)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / _source(part), tmp_path / _source(part))
    # what _jpegcrop.c includes, and the headers it takes where the system has none
    shutil.copy(ROOT / "chunkio" / "images" / "_jpegcrop_dl.h", tmp_path / "chunkio" / "images")
    shutil.copytree(ROOT / "chunkio/images/_vendor", tmp_path / "chunkio/images/_vendor")
    build = [sys.executable, "setup.py", "build_ext", "--inplace"]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=240)

    first = run()
    assert first.returncode == 0, first.stderr
    # both build: _jpegcrop takes its vendored headers where the system has none
    assert _built(tmp_path / "chunkio") == ["_fletcher", "_jpegcrop", "_sparse_rows", "_yuv"], (
        first.stderr
    )
    assert _built(tmp_path / "chunkio") == _built(tmp_path / "build")
    time.sleep(0.01)  # the broken sources are newer than the builds
    for part in PARTS:
        source = tmp_path / _source(part)
        source.write_text(source.read_text() + "\n#error deliberately broken\n")
    second = run()
    assert second.returncode == 0, second.stderr
    assert "deliberately broken" in second.stdout + second.stderr
    assert _built(tmp_path) == []


def _check(missing: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m chunkio.testing.compiled`` with module ``missing`` not importable."""
    hide = "" if missing is None else f"sys.modules[{missing!r}] = None; "
    main = "runpy.run_module('chunkio.testing.compiled', run_name='__main__')"
    code = f"import runpy, sys; {hide}{main}"
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(**env), capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("part", PARTS, ids=lambda p: p.name)
@pytest.mark.parametrize("strict", [{"CI": "true"}, {"CHUNKIO_REQUIRE_EXTENSIONS": "1"}])
def test_a_missing_part_fails_the_check_under_ci_naming_what_it_needs(
    part: CompiledPart, strict: dict[str, str]
) -> None:
    run = _check(part.module, **strict)
    assert run.returncode == 1, run.stdout + run.stderr
    line = f"compiled parts: {part.name} missing: not built (import of {part.module} halted"
    assert line in run.stderr
    needs = "libjpeg62-turbo-dev" if part is JPEG else "a C compiler"
    assert needs in run.stderr and "python setup.py build_ext --inplace" in run.stderr
    assert "needs every one built" in run.stderr


@pytest.mark.parametrize("part", PARTS, ids=lambda p: p.name)
def test_elsewhere_a_missing_part_is_a_warning(part: CompiledPart) -> None:
    """pip installs without libjpeg-turbo's headers are supported: not fatal outside CI."""
    run = _check(part.module, CI="false")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"compiled parts: {part.name} missing: not built" in run.stderr
    assert "going on without them" in run.stderr
    other = YUV if part is JPEG else JPEG
    assert f"{other.name} missing" not in run.stderr


def test_with_every_part_built_the_check_passes_under_ci() -> None:
    if problems():  # this machine's build: said by the run's last line, failed by CI's check
        unavailable(f"chunkio's compiled parts are not all built: {problems()}")
    run = _check(None, CI="true")
    assert (run.returncode, run.stdout, run.stderr) == (
        0,
        "compiled parts: _jpegcrop, _yuv, _fletcher, _sparse_rows built\n",
        "",
    )


def test_a_build_of_older_c_source_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that lacks what the current C source defines is reported, not used."""
    old = types.ModuleType(YUV.module)
    monkeypatch.setitem(sys.modules, YUV.module, old)
    assert problems([YUV]) == {YUV: "a stale build (it lacks rgbx_to_rgb)"}
    old.rgbx_to_rgb = len  # type: ignore[attr-defined]
    assert problems([YUV]) == {}


def test_a_c_source_edited_after_the_build_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a source checkout the C file beside the module must not be newer than the build
    (what a test run right after an edit, without rebuilding, would otherwise test)."""
    package = tmp_path / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    built = package / "_fake.py"  # stands for the compiled module: any file importlib loads
    built.write_text("ANSWER = 42\n")
    source = package / "_fake.c"
    source.write_text("int answer(void) { return 42; }\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    part = CompiledPart("_fake", "fakepkg._fake", "nothing", ("ANSWER",))
    now = time.time()
    os.utime(source, (now - 10, now - 10))
    os.utime(built, (now - 5, now - 5))
    assert problems([part]) == {}
    os.utime(source, (now, now))
    assert problems([part]) == {part: f"older than {source} (edited since the build)"}
    source.unlink()  # an installed package: no source beside it, nothing to compare
    assert problems([part]) == {}


def test_which_runs_must_have_every_part(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CI", "CHUNKIO_REQUIRE_EXTENSIONS"):
        monkeypatch.delenv(name, raising=False)
    assert not compiled.required()
    monkeypatch.setenv("CHUNKIO_REQUIRE_EXTENSIONS", "0")
    assert not compiled.required()
    monkeypatch.setenv("CHUNKIO_REQUIRE_EXTENSIONS", "1")
    assert compiled.required()
    monkeypatch.delenv("CHUNKIO_REQUIRE_EXTENSIONS")
    monkeypatch.setenv("CI", "true")
    assert compiled.required()


TESTS = """
import pytest

def test_needs_the_crop_extension():
    pytest.skip("chunkio's libjpeg-turbo extension is not built")

def test_needs_the_region_decode():
    pytest.skip("the crop-region extension is not built")

def test_needs_a_server():
    pytest.skip("moto is not installed")

def test_needs_nothing():
    pass
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("hidden", [None, JPEG.module])
def test_a_run_ends_saying_which_compiled_parts_are_missing(
    tmp_path: Path, hidden: str | None
) -> None:
    if hidden is None and problems():
        unavailable(f"chunkio's compiled parts are not all built: {problems()}")
    conftest = "" if hidden is None else f"import sys\nsys.modules[{hidden!r}] = None\n"
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_parts.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's options
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "chunkio.testing.skips", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        # only the plugin under test: the installed ones (hypothesis, zarr's) cost seconds
        env=_env(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = run.stdout.split("skips by reason", 1)[1]
    lines = [line for line in summary.splitlines() if line.startswith("compiled parts:")]
    if hidden is None:
        assert lines == ["compiled parts: _jpegcrop, _yuv, _fletcher, _sparse_rows built"]
    else:
        assert len(lines) == 1, summary
        assert lines[0].startswith(
            "compiled parts: _jpegcrop missing (2 tests skipped): not built (import of"
        )
        assert "libjpeg62-turbo-dev" in lines[0]
