"""The admin API of the tenancy tree: organisations, teams and projects, their keys and limits."""
