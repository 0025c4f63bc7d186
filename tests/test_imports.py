"""Every module of the library imports first in a fresh interpreter (no module
relies on another having been imported before it)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> list[str]:
    names = []
    for package in ("ledger", "projections"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules()


def test_the_module_list_covers_the_library() -> None:
    assert {"ledger", "ledger.session", "projections.validity", "ledger.persistence.sqlite"} <= set(
        MODULES
    )


def _import_alone(name: str) -> str | None:
    """None if ``import name`` works in a fresh interpreter, else its last error line."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = dict(zip(MODULES, pool.map(_import_alone, MODULES), strict=True))
    assert {name: why for name, why in outcomes.items() if why is not None} == {}


@pytest.mark.parametrize("name", ["ledger.cli"])
def test_the_command_line_does_not_import_optional_backends_at_start(name: str) -> None:
    code = (
        f"import sys, {name}; "
        "print(','.join(m for m in ('mcp', 'langgraph', 'starlette', 'uvicorn') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("package", "missing", "extra"),
    [
        ("ledger.integrations.langgraph", "langgraph", "langgraph"),
        ("ledger.integrations.mcp", "mcp", "mcp"),
        ("ledger.serve", "starlette", "serve"),
        ("ledger.serve", "jinja2", "serve"),
    ],
)
def test_an_integration_without_its_extra_names_the_extra_to_install(
    package: str, missing: str, extra: str
) -> None:
    # A package that cannot be imported, as where the extra was never installed.
    code = f"import sys; sys.modules[{missing!r}] = None; import {package}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"ModuleNotFoundError: {package} needs the {missing!r} package, which is not "
        f"installed; install the {extra!r} extra: pip install -e '.[{extra}]' in provledger's "
        f"source directory, or pip install 'provledger[{extra}]' where it was installed as a "
        "package"
    )
