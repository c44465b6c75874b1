"""``hrl-policy``: the command line of the policy layer (DESIGN.md section 4).

- :mod:`.core`: the subcommand registry (:func:`subcommand`, :func:`arg`), the parser and :func:`main` (exit codes);
- :mod:`.commands`: every subcommand's arguments, registered on import; bodies import what they need when run,
  so ``hrl-policy --help`` starts fast and only the training commands load torch;
- :mod:`.cache`, :mod:`.bundle`, :mod:`.config`, :mod:`.simulate`, :mod:`.train`: the longer command bodies.
"""

from . import commands as commands
from .core import PROG, SUBCOMMANDS, Subcommand, arg, build_parser, main, subcommand

__all__ = ["PROG", "SUBCOMMANDS", "Subcommand", "arg", "build_parser", "main", "subcommand"]
