"""Shared by every test directory: with pytest's default ``prepend`` import mode, loading this file puts
``tests/`` on ``sys.path``, so helpers here (``waiting.wait_until``) import as top-level modules."""
