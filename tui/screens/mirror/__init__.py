"""The Mirror screen and its Add dialog."""
