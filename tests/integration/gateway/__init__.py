"""The gateway through a real cluster: the OpenAI shape, accounting, routing, batches, and
connections held, bounded and broken off."""
