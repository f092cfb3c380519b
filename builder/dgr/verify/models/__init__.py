"""What the checks run against: the environment, a GGUF's tensors, synthetic models, prompts."""
