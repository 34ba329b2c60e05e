"""Where a request goes: replica choice, forwarding to engines and outside providers, breakers."""
