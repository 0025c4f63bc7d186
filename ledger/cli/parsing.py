"""How a command line is read before a command runs: an option that takes one
value given more than once is refused (:class:`CheckedGroup`)."""

from __future__ import annotations

import click


def _given(
    command: click.Command, ctx: click.Context, args: list[str]
) -> tuple[list[tuple[str, click.Option | None]], str | None, list[str]]:
    """The options ``args`` give where click reads options (not as an option's value,
    nor after ``--``): each name as typed with its option (None: a help option, or
    one unknown); for a group, the command named and the arguments after it."""
    takes_value: dict[str, click.Option] = {}
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and not (param.count or param.is_flag):
            takes_value.update(dict.fromkeys(param.opts, param))
    given: list[tuple[str, click.Option | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1:
            long = arg.startswith("--")
            name = arg.split("=", 1)[0] if long else arg[:2]
            option = takes_value.get(name)
            given.append((name, option))
            if option is not None and not (("=" in arg) if long else len(arg) > 2):
                i += option.nargs  # its value, whatever it looks like
        elif isinstance(command, click.Group):
            return given, arg, args[i + 1 :]
        i += 1
    return given, None, []


def _asks_help(command: click.Command, ctx: click.Context, args: list[str]) -> bool:
    """Whether ``args`` ask ``command`` (or the command a group's arguments name)
    for its help, as click reads them: help answers whatever else is given."""
    given, named, rest = _given(command, ctx, args)
    if any(name in ctx.help_option_names for name, _ in given):
        return True
    sub = command.get_command(ctx, named) if isinstance(command, click.Group) and named else None
    return sub is not None and _asks_help(sub, click.Context(sub, parent=ctx), rest)


def refuse_repeated(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """Refuse an option that takes one value given more than once (click keeps the
    last silently: ``verify --heads old.jsonl --heads new.jsonl`` would check only
    the new file, ``--url a --url b`` open only ``b``). A group's own options end
    at its command's name. Help asked for (``--help``) and shell completion, which
    parses what is typed so far, are not refused."""
    if ctx.resilient_parsing or _asks_help(command, ctx, args):
        return
    seen: dict[click.Option, str] = {}
    for name, option in _given(command, ctx, args)[0]:
        if option is None or option.multiple:
            continue
        if option in seen:
            also = "" if seen[option] == name else f" (as {seen[option]} too)"
            raise click.UsageError(
                f"{name} was given more than once{also}: it takes one value, and only "
                "the last would count",
                ctx,
            )
        seen[option] = name


class CheckedGroup(click.Group):
    """A command group whose commands (and itself) refuse an option given twice
    that takes one value (:func:`refuse_repeated`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_repeated(self, ctx, args)
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, click.Group):
            # the command's own context (not yet parsed), so a refusal shows its usage
            own = click.Context(
                command, info_name=name, parent=ctx, resilient_parsing=ctx.resilient_parsing
            )
            refuse_repeated(command, own, rest)
        return name, command, rest
