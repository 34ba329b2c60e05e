"""The SQLite store: one file, one writer connection; each concern a mixin of its own."""
