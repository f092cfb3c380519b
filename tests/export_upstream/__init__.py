"""`dgr export-upstream`: the package in the form llama.cpp takes contributions, and every refusal.

A small llama.cpp-like upstream carries upstream's own pull request template, CONTRIBUTING.md, AGENTS.md,
ci/README.md and docs/build.md (the perplexity text); the series is the three fixture patches of
tests/helpers.py. The verify report and the bench result are fakes, well-formed, for the digest
`buildplan.plan` computes: the export only renders them.
"""
