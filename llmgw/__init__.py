"""llmgw: run LLMs on your own GPU and CPU servers behind one OpenAI- and
Anthropic-compatible endpoint, operated from the terminal."""

__version__ = "0.1.0"
