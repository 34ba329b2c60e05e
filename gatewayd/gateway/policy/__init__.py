"""Who may ask and how much: keys, tenancy, rate limits, budgets, prices and admission bands."""
