"""How ctl replies look to people: one module per command group registers its renderers."""
