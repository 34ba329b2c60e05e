"""How commands print: tables for people, JSON for scripts."""
