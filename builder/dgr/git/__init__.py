"""The git plumbing: the repository layer on gitpython, `git am` of the series."""
