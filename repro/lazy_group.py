import importlib

import click


class LazyGroup(click.Group):
    """A Click group whose subcommands are imported only when used, so `--help` stays fast.

    `lazy` maps a command name to "module:attribute", or to ("module:attribute", "short help") so that the
    group's own `--help` lists the command without importing it.
    """

    def __init__(self, *args, lazy: dict[str, str | tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = {name: (spec, None) if isinstance(spec, str) else tuple(spec) for name, spec in (lazy or {}).items()}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy:
            module_name, attr = self.lazy[name][0].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            short = self.lazy.get(name, (None, None))[1]
            if short is None:
                cmd = self.get_command(ctx, name)
                if cmd is None or cmd.hidden:
                    continue
                short = cmd.get_short_help_str(formatter.width - 6 - max(map(len, self.list_commands(ctx))))
            rows.append((name, short))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
