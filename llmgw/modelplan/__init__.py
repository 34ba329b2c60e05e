"""Model planning: how much memory a model needs and which layouts fit (pure)."""
