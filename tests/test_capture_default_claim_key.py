"""``Session.capture`` without a ``claim_key`` keys the evidence ``source:<uri>``:
a uri too long for that key is refused naming the uri, which the caller gave."""

from __future__ import annotations

import pytest

from ledger import Ledger
from ledger.errors import ValueTooLargeError

SCOPE = "proj-a"
#: 505 characters: 'source:' and it make a claim key of 512, the most a claim key holds.
LONGEST = "https://docs.test/" + "p" * 487


def test_a_uri_too_long_for_the_default_claim_key_is_refused_naming_the_uri(
    ledger: Ledger,
) -> None:
    admin = ledger.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    before = ledger.position

    # When the uri is one character longer than the default key can hold
    with pytest.raises(ValueTooLargeError) as refused:
        agent.capture(scope=SCOPE, uri=LONGEST + "p", content=b"x")

    # Then the refusal names the uri and what to do, and nothing is written
    assert str(refused.value) == (
        "uri is 506 characters: the default claim key 'source:<uri>' is 513 characters; "
        "the limit is 512; give a claim_key (or a shorter uri)"
    )
    assert ledger.position == before
    # And the uri is captured with a claim key of its own, as is one that fits the default
    keyed = agent.capture(scope=SCOPE, uri=LONGEST + "p", content=b"x", claim_key="docs.page")
    fitting = agent.capture(scope=SCOPE, uri=LONGEST, content=b"x")
    assert agent.get(keyed).claim_key == "docs.page"
    assert agent.get(fitting).claim_key == "source:" + LONGEST
    # A claim key given too long is still refused naming claim_key
    with pytest.raises(ValueTooLargeError, match=r"^claim_key is 513 characters"):
        agent.capture(scope=SCOPE, uri="https://x.test", content=b"x", claim_key="k" * 513)
