"""The groups of `dgr verify`, one module each: `dgr.verify.checks.<group>` for every group of the registry
(`dgr.contracts.report.Group`), defining `GROUP` (see dgr.verify.checks.session). The conformance groups
(`ownership`, `boundary`, `kv`) have `run_fixtures(env)`, the checks on synthetic fixtures, and
`run_model(env, model)`, the checks on one locked real model; they run the fixtures first, then every
locked model (the default one first). The checks of a model carry its name (`split-3/gemma3`)."""
