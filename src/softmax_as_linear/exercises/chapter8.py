"""Chapter 8's coding exercises (none declared yet)."""
from __future__ import annotations

EXERCISES: tuple = ()
