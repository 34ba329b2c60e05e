"""A stand-in for vLLM, built into a wheel by llmgw's tests: vLLM's CLI, no GPU needed."""

__version__ = "0.11.0"
