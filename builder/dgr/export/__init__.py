"""`dgr export-upstream`: the pull requests, their branches and bundles, the rendered documents."""
