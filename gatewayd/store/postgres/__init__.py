"""The PostgreSQL store (asyncpg pool); each concern a mixin of its own."""
