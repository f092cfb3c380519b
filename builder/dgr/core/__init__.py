"""The core: logging, the subprocess wrapper, paths, file-system helpers, digests."""
