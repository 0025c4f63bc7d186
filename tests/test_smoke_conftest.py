from __future__ import annotations

from ledger import Kind, Outcome

from .conftest import World


def test_world_fixture_gives_working_principals(world: World) -> None:
    e1 = world.agent.capture(scope="proj-a", uri="https://x.test/a", content=b"a", id="E1")
    world.reviewer.accept(e1)
    m1 = world.agent.propose(
        scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, parents=[e1], id="M1"
    )
    world.reviewer.accept(m1)
    assert world.agent.read("proj-a", "k").outcome == Outcome.FOUND
