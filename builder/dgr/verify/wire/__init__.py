"""The protocol to a layer worker: the process (client), frames, the bundle codec, a chain of workers."""
