"""A stand-in for SGLang, built into a wheel by llmgw's tests: SGLang's CLI, no GPU needed."""

__version__ = "0.5.3"
