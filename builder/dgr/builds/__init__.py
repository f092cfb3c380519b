"""The build: the toolchain, the plan and its inputs digest, apply + configure + ninja, the artifacts,
the cache of builds and of verify reports, build timing."""
