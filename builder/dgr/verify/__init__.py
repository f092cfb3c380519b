"""The conformance harness: drives layer-worker processes and checks the patched llama.cpp."""
