"""The typed contracts that cross subsystems, one module per schema.

Each record is a frozen dataclass with `to_json` / `from_json`; closed sets of values are `Literal`s.
The series manager writes the build manifest (`buildmanifest`), verify writes the report (`report`), bench
writes its result (`bench`, with the comparisons with upstream in `upstreambench`); commands and the export
read them back through `from_json`, which refuses a malformed document with a ConfigError naming what is
wrong. The lock files are `locks` and `modellock`."""
