"""dgr: the series manager for the llama.cpp patch series (see README.md)."""
