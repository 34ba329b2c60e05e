"""The client API's shapes: OpenAI, Anthropic and Responses bodies, request checks, errors and the OpenAPI document."""
