"""How the MCP server reads a tool's arguments: each tool built from its function
with its text arguments kept as sent (:class:`TextAsSent`) and its schemas
untitled, and what is wrong with arguments said argument by argument."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import ToolAnnotations
from pydantic import PrivateAttr, ValidationError

from ledger.validation import quoted

__all__ = ["TextAsSent", "argument_errors", "make_tool", "non_finite"]


def argument_errors(error: ValidationError) -> str:
    """What pydantic found wrong with a tool's arguments, one clause per argument:
    ``argument 'limit' (0): Input should be greater than 0``."""
    clauses = []
    for found in error.errors(include_url=False):
        where = "".join(
            f"[{part}]" if isinstance(part, int) else (f".{part}" if i else str(part))
            for i, part in enumerate(found["loc"])
        )
        given = found.get("input")
        shown = "" if found["type"] == "missing" else f" ({quoted(given)})"
        clauses.append(f"argument {where or '?'!r}{shown}: {found['msg']}")
    return "; ".join(dict.fromkeys(clauses))


def non_finite(given: Any, path: str, depth: int = 0) -> str | None:
    """Where in an argument a float is infinite or NaN (``value.a[2]``), or None."""
    if isinstance(given, float):
        return None if math.isfinite(given) else path
    if depth > 64:  # deeper than any value the ledger keeps: its own check says so
        return None
    if isinstance(given, dict):
        items: Any = ((f"{path}.{k}", v) for k, v in given.items())
    elif isinstance(given, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(given))
    else:
        return None
    for inner, value in items:
        found = non_finite(value, inner, depth + 1)
        if found is not None:
            return found
    return None


def _takes_text(schema: dict[str, Any]) -> bool:
    """Whether an argument's JSON schema admits a string (one without a type
    admits any value)."""
    return any(branch.get("type", "string") == "string" for branch in schema.get("anyOf", [schema]))


class TextAsSent(FuncMetadata):
    """A tool's arguments read as the SDK reads them, except that text given for
    an argument that takes text stays that text. The SDK reads text that spells
    JSON as the JSON it spells unless the argument is typed exactly ``str``: an
    ``id`` or ``after`` of "null" would be no argument at all (paging past a
    record whose id is ``null`` would start over), a ``claim_prefix`` of '["a"]'
    would be refused as a list, a ``value`` of "{}" would be stored as ``{}``.
    Text for an argument that takes no text (``parents`` sent as '["E1"]') is
    still read as JSON, as the SDK reads it."""

    #: The arguments that take text, read from the schema once.
    _texts: frozenset[str] = PrivateAttr(default=frozenset())

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        properties = self.arg_model.model_json_schema(by_alias=True).get("properties", {})
        self._texts = frozenset(name for name, schema in properties.items() if _takes_text(schema))

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with the text of arguments that take no text read as JSON."""
        kept = {k: v for k, v in data.items() if isinstance(v, str) and k in self._texts}
        parsed = super().pre_parse_json({k: v for k, v in data.items() if k not in kept})
        return {name: kept[name] if name in kept else parsed[name] for name in data}


#: The keywords of a JSON schema whose value maps names to schemas.
_NAMED_SCHEMAS = ("properties", "$defs", "patternProperties")


def _untitled(schema: Any) -> Any:
    """``schema`` without pydantic's ``title`` keywords (each a field's or a type's
    name again: "Cause Superseded By"), which only lengthen what a model is sent."""
    if isinstance(schema, list):
        return [_untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: (
            {name: _untitled(inner) for name, inner in value.items()}
            if key in _NAMED_SCHEMAS and isinstance(value, dict)
            else _untitled(value)
        )
        for key, value in schema.items()
        if key != "title"
    }


def make_tool(fn: Callable[..., Any], description: str, hints: ToolAnnotations) -> Tool:
    """The SDK's tool for ``fn``, its text arguments kept as sent (:class:`TextAsSent`)
    and its schemas untitled (:func:`_untitled`)."""
    tool = Tool.from_function(
        fn,
        name=fn.__name__,
        title=hints.title,
        description=description,
        annotations=hints,
        structured_output=True,
    )
    given = tool.fn_metadata
    reading = TextAsSent(
        arg_model=given.arg_model,
        output_schema=_untitled(given.output_schema),
        output_model=given.output_model,
        wrap_output=given.wrap_output,
    )
    return tool.model_copy(
        update={"fn_metadata": reading, "parameters": _untitled(tool.parameters)}
    )
