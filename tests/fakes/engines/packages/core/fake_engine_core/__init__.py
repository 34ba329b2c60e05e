"""What the vLLM and SGLang stand-ins share: an OpenAI server and the fake-GPU contract."""
