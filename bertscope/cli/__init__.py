"""The command line: `bertscope` opens the explorer, `bertscope COMMAND` runs an analysis headless.

`common` holds the group and what the commands share; each other module holds one family
of commands, registered on the group here, in one place, so no module imports it back.
The program's Ctrl-C handling goes in first, before the imports below (numpy, click: a
second or so), so an interrupt at any moment from launch gives one line (`interrupts`).
"""

from bertscope.cli import interrupts

if interrupts.launched_as_program():
    interrupts.guard()

from bertscope.cli import (  # noqa: E402 - after the guard
    attention,
    erase,
    fill_attribute,
    geometry,
    importance,
    mixing,
    patching,
    patterns,
    probing,
    sae,
    syntax,
)
from bertscope.cli.common import main  # noqa: E402 - after the guard

for command in (
    attention.explore,
    attention.info,
    attention.attention,
    attention.export,
    patterns.patterns,
    probing.probe,
    erase.erase,
    probing.treebank,
    probing.cache,
    importance.importance,
    importance.prune,
    fill_attribute.fill,
    fill_attribute.attribute,
    geometry.geometry,
    geometry.compare,
    patching.patch,
    syntax.syntax,
    mixing.mixing,
    sae.sae,
):
    main.add_command(command)

__all__ = ["main"]
