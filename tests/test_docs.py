"""The README's code blocks run, and its two set-up-and-go commands stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"readme_block_{index}"}
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), namespace)
    assert "led" in namespace


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


def test_readme_has_exactly_two_set_up_and_go_commands() -> None:
    text = README.read_text()
    section = text.split("## Set up and go", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(commands) == 2
    assert commands[0].strip().endswith("provledger demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    text = README.read_text()
    section = text.split("## Set up and go", 1)[1].split("\n## ", 1)[0]
    test_command = re.findall(r"```sh\n(.*?)```", section, flags=re.S)[1].strip()
    ci = (README.parent / ".ci" / "run").read_text()
    assert test_command in ci


def test_the_compatibility_promise_names_every_upcast_event() -> None:
    from eventsourcing.domain import DomainEvent

    from ledger import domain

    versioned = sorted(
        f"{outer.__name__}.{inner.__name__}"
        for outer in vars(domain).values()
        if isinstance(outer, type) and outer.__module__ == domain.__name__
        for inner in vars(outer).values()
        if isinstance(inner, type)
        and issubclass(inner, DomainEvent)
        and getattr(inner, "class_version", 1) > 1
    )
    promise = README.read_text().split("**Compatibility promise.**", 1)[1].split("\n\n", 1)[0]
    named = sorted(set(re.findall(r"`(\w+\.\w+)`", promise)))
    assert versioned and named == versioned


def test_the_architecture_picture_names_files_that_exist_and_is_drawn_from_its_source() -> None:
    root = README.parent
    source = (root / "docs" / "architecture.dot").read_text()
    drawn = (root / "docs" / "architecture.svg").read_text()
    named = re.findall(r"(?:\\n|, )((?:ledger|projections)/[\w/.]*)", source)
    assert len(set(named)) >= 15
    missing = sorted({path for path in named if not (root / path).exists()})
    assert missing == [], f"docs/architecture.dot names what is not there: {missing}"
    # The picture is the source's rendering (dot -Tsvg docs/architecture.dot -o
    # docs/architecture.svg): each path and each step it draws is in it.
    steps = re.findall(r'"(\d\. [^\\"]+)', source)
    assert len(steps) == 3
    stale = sorted({text for text in [*named, *steps] if text not in drawn})
    assert stale == [], f"docs/architecture.svg is older than its source: {stale}"
    assert "](docs/architecture.svg)" in README.read_text()
