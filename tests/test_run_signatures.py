"""A run's reads and proposals take exactly what the session's do.

``RunContext.read``, ``get``, ``explain``, ``records``, ``propose`` and
``capture`` are the session's methods within the run: the same parameters
(names, kinds, defaults, types) and return types, so a type checker, ``help()``
and an editor say what they take, and a wrong call is refused before it runs.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from ledger import RunContext, Session

REPO = Path(__file__).resolve().parent.parent
MYPY = REPO / ".venv" / "bin" / "mypy"

#: The session's methods a run offers (the run supplies nothing of their input).
FORWARDED = ("read", "get", "explain", "records", "propose", "capture")


def test_the_forwarded_methods_are_every_method_a_run_shares_with_a_session() -> None:
    # Given the public methods of RunContext that a Session has too
    shared = {
        name
        for name, member in vars(RunContext).items()
        if not name.startswith("_") and inspect.isfunction(member) and hasattr(Session, name)
    }

    # Then they are the ones compared below: a new one is compared as well
    assert shared == set(FORWARDED)


def shape(signature: inspect.Signature) -> list[tuple[object, ...]]:
    return [(p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()]


@pytest.mark.parametrize("name", FORWARDED)
def test_a_run_method_has_the_session_method_signature(name: str) -> None:
    # Given the run's method and the session's, annotations resolved to types
    run_method = inspect.signature(getattr(RunContext, name), eval_str=True)
    session_method = inspect.signature(getattr(Session, name), eval_str=True)

    # Then every parameter (name, kind, default, type) and the return type are the same
    assert shape(run_method) == shape(session_method)
    assert run_method.return_annotation == session_method.return_annotation
    # And none takes whatever it is given
    kinds = {p.kind for p in run_method.parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}


@pytest.mark.parametrize("name", FORWARDED)
def test_a_run_method_says_it_is_the_session_method_within_the_run(name: str) -> None:
    doc = inspect.getdoc(getattr(RunContext, name)) or ""
    assert f"Session.{name}" in doc
    assert "within the run" in doc


def strict_mypy(program: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` of ``program`` with the repository's configuration."""
    return subprocess.run(
        [str(MYPY), "--strict", "--cache-dir", str(cache), str(program)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(Path(sys.executable).parent)},
    )


def test_mypy_refuses_a_run_call_the_session_would_refuse(tmp_path: Path) -> None:
    # Given a program calling a run's methods with arguments no session takes
    program = tmp_path / "calls.py"
    program.write_text(
        "from ledger import Ledger\n"
        "\n"
        "led = Ledger.open('memory:')\n"
        "with led.authenticate('token').run('task') as run:\n"
        "    run.read(1, 2, 3, bogus=4)\n"
        "    run.propose(scope=1)\n"
        "    reveal_type(run.propose)\n"
    )

    # When mypy checks it strictly, with the repository's configuration
    done = strict_mypy(program, tmp_path / "cache")
    out = done.stdout

    # Then both calls are refused, each on its line, naming what is wrong
    assert done.returncode == 1, out + done.stderr
    assert f'{program}:5: error: Unexpected keyword argument "bogus" for "read"' in out, out
    assert f'{program}:5: error: Argument 1 to "read" of "RunContext" has incompatible' in out
    assert f'{program}:6: error: Missing positional arguments "claim_key", "value", "kind"' in out
    assert f'{program}:6: error: Argument "scope" to "propose" of "RunContext"' in out
    # And the method is shown with its parameters, not as taking anything
    revealed = next(line for line in out.splitlines() if "Revealed type" in line)
    assert "def (scope: str, claim_key: str, value: Any, kind: " in revealed, revealed
    assert "*args" not in revealed
