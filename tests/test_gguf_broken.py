"""A GGUF file cut or corrupted at any offset is a clear error (ConfigError, exit 8, naming the file, the
offset and the field), or, where the change leaves a well-formed header (a byte of tensor data), a
successful parse; never another exception. Checked with hypothesis on the real locked models (cut at and
bytes flipped at many offsets, through a copy-on-write map of the file, so no case copies 250 MB) and on a
synthetic model, and through `dgr generate --model` on the first megabyte of Gemma 3 (an IndexError, exit
11, before the strict reader)."""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

import platformdirs
import pytest
from dgr.cli import main
from dgr.contracts import locks
from dgr.core.paths import Cache
from dgr.errors import ConfigError, NetworkError
from dgr.sources import model
from dgr.verify.models import gguffile, inventory, synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT

# the caches that may hold the models already, read before the tests' own cache is set
USER_CACHE = Path(os.environ.get("DGR_CACHE_DIR") or platformdirs.user_cache_dir("dgr"))
CASES_PER_MODEL = {"smollm2": 400, "gemma3": 200}


def parse(buf: object, size: int, path: Path) -> inventory.Inventory:
    return inventory.of_header(path, gguffile.parse(buf, size, path))


def parsed_or_refused(buf: object, size: int, path: Path) -> str:
    """The outcome: "parsed", or "refused" (a ConfigError, exit 8, naming the file and where); any other
    exception fails the test."""
    try:
        parse(buf, size, path)
    except ConfigError as exc:
        assert exc.exit_code == 8
        assert exc.what.startswith(f"{path}: not a ")
        assert "at byte " in exc.what or "metadata " in exc.what, exc.what
        return "refused"
    return "parsed"


class Mapped:
    """The file once in memory (read-only map), and a private copy-on-write map per corrupted case."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        self._file = path.open("rb")
        self.view = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        header = gguffile.parse(self.view, self.size, path)
        self.header_end = header.data_offset
        self.infos = header.infos_offset
        self.data_end = max(header.data_offset + t.offset + t.n_bytes for t in header.tensors)
        """Where the last tensor's bytes end (alignment padding may follow)."""
        self.inventory = parse(self.view, self.size, path)

    def cut(self, at: int) -> str:
        with memoryview(self.view)[:at] as head:  # a read past the cut raises: it must be refused first
            return parsed_or_refused(head, at, self.path)

    def flipped(self, changes: list[tuple[int, int]]) -> str:
        with mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_COPY) as copy:
            for at, mask in changes:
                copy[at] ^= mask
            outcome = parsed_or_refused(copy, self.size, self.path)
            if outcome == "parsed" and all(at >= self.header_end for at, _ in changes):
                assert parse(copy, self.size, self.path) == self.inventory  # tensor data: the same header
            return outcome

    def close(self) -> None:
        self.view.close()
        self._file.close()


def offsets(m: Mapped) -> st.SearchStrategy[int]:
    """Mostly in the header (where the structure is): its first bytes, the metadata, the tensor infos; some
    anywhere in the file."""
    return st.one_of(
        st.integers(0, 64),
        st.integers(0, m.header_end + 64),
        st.integers(m.infos, m.header_end),
        st.integers(0, m.size - 1),
    )


def cut_or_flipped(m: Mapped, data: st.DataObject) -> None:
    """One case: the file cut at an offset (refused unless only padding is cut), or 1 to 3 bytes of it
    changed (refused or parsed)."""
    if data.draw(st.booleans(), "cut"):
        at = data.draw(offsets(m), "cut at")
        assert m.cut(at) == ("refused" if at < m.data_end else "parsed")
    else:
        m.flipped(data.draw(st.lists(st.tuples(offsets(m), st.integers(1, 255)), min_size=1, max_size=3)))


# --------------------------------------------------------------------------- a synthetic model (unit)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapped]:
    mapped = Mapped(synth.ensure(synth.QWEN2, tmp_path_factory.mktemp("synth")))
    yield mapped
    mapped.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_cut_or_flipped_synthetic_model_is_refused_or_parsed(
    synthetic: Mapped, data: st.DataObject
) -> None:
    cut_or_flipped(synthetic, data)


@pytest.mark.parametrize(
    ("offset", "value", "expected"),
    [
        (0, b"GGUX", "at byte 0, magic: b'GGUX' is not b'GGUF'"),
        (4, (9).to_bytes(4, "little"), "at byte 4, version: 9 is not one of 2, 3"),
        (8, (1 << 40).to_bytes(8, "little"), "at byte 8, tensor count: 1099511627776 items do not fit"),
    ],
)
def test_the_error_names_the_offset_and_the_field(
    synthetic: Mapped, tmp_path: Path, offset: int, value: bytes, expected: str
) -> None:
    data = bytearray(synthetic.path.read_bytes())
    data[offset : offset + len(value)] = value
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as raised:
        inventory.read(broken)
    assert raised.value.what.startswith(f"{broken}: not a valid GGUF file: {expected}")


def test_every_cut_of_the_synthetic_header_is_refused(synthetic: Mapped) -> None:
    # every offset of the header, and every tensor's data cut short by one byte
    for at in range(synthetic.header_end):
        assert synthetic.cut(at) == "refused", at
    assert synthetic.cut(synthetic.data_end - 1) == "refused"
    assert synthetic.cut(synthetic.data_end) == "parsed"


# --------------------------------------------------------------------------- the real models (e2e)


@pytest.fixture(scope="module")
def real_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Mapped]]:
    """The locked models: from $DGR_TEST_CACHE or the user's cache when they are there, else fetched (as
    `dgr fetch --model` does) into $DGR_TEST_CACHE or a temporary cache; skipped only when absent and
    unreachable."""
    lock = locks.load_models(ROOT / "locks").all()
    shared = os.environ.get("DGR_TEST_CACHE")
    candidates = [Path(shared)] if shared else []
    candidates.append(USER_CACHE)
    paths = None
    for root in candidates:
        found = [root / "models" / m.sha256 / m.file for m in lock]
        if all(p.is_file() and p.stat().st_size == m.size for p, m in zip(found, lock, strict=True)):
            paths = found
            break
    if paths is None:
        root = Path(shared) if shared else tmp_path_factory.mktemp("models-cache")
        try:
            paths = model.fetch_all(Cache(root), lock)
        except NetworkError as exc:
            pytest.skip(f"the locked models are not cached and cannot be fetched: {exc.what}")
    mapped = {m.name: Mapped(p) for m, p in zip(lock, paths, strict=True)}
    yield mapped
    for m in mapped.values():
        m.close()


def real_case(name: str) -> object:
    @pytest.mark.e2e
    @settings(
        max_examples=CASES_PER_MODEL[name],
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=st.data())
    def case(real_models: dict[str, Mapped], data: st.DataObject) -> None:
        cut_or_flipped(real_models[name], data)

    case.__doc__ = f"{name}: cut or flipped at {CASES_PER_MODEL[name]} offsets, refused (exit 8) or parsed."
    return case


test_a_cut_or_flipped_smollm2_is_refused_or_parsed = real_case("smollm2")
test_a_cut_or_flipped_gemma3_is_refused_or_parsed = real_case("gemma3")


@pytest.mark.e2e
def test_the_first_megabyte_of_gemma3_is_exit_8_naming_the_field(
    real_models: dict[str, Mapped], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "gemma-first-mb.gguf"
    cut.write_bytes(real_models["gemma3"].view[: 1 << 20])
    start = time.monotonic()
    assert main(["generate", "--model", str(cut), "hi"]) == 8
    err = capsys.readouterr().err
    assert time.monotonic() - start < 5
    assert f"dgr: config: --model {cut}: not a valid GGUF file: at byte 971, metadata 20 " in err
    assert "`tokenizer.ggml.tokens` (array length): 262144 items do not fit" in err
    assert "Traceback" not in err and "internal error" not in err
