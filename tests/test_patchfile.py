"""Parsing git format-patch mails."""

from __future__ import annotations

import pytest
from dgr.series import patchfile

from tests.helpers import FIXTURES

FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
HEXAGON = FIXTURES / "series" / "patches" / "readme-mark-the-hexagon-backend-as-experimental.patch"


def test_parse_fixture_patch() -> None:
    patch = patchfile.load(HEXAGON)
    assert patch.from_hash == "0" * 40
    assert patch.subject_raw == "[PATCH] readme : mark the Hexagon backend as experimental"
    assert patch.subject == "readme : mark the Hexagon backend as experimental"
    assert patch.author == "Series-Fixture <fixture@example.invalid>"
    assert patch.trailer("upstream-status") == ["Inappropriate [test fixture]"]
    assert "Upstream-Status" not in patch.body
    assert len(patch.body.split()) >= 20
    [readme] = patch.files
    assert readme.path == "README.md"
    assert readme.hunks == (
        "@@ -82,7 +82,7 @@ The `llama.cpp` project is build on top of the [ggml](https://github.com/ggml-or",
    )
    assert readme.added == ("| [Hexagon [Experimental]](docs/backend/snapdragon/README.md) | Snapdragon |",)


def test_numbered_subject_and_signature() -> None:
    text = (
        "From 1234567890123456789012345678901234567890 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@b>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
        "Subject: [PATCH 2/3] tests : add a\n test with a folded subject\n\n"
        "Why it exists.\n\nSigned-off-by: A <a@b>\nUpstream-Status: Submitted\n  [https://example.invalid/pr/1]\n"
        "---\n notes after the separator\n\n"
        "diff --git a/tests/CMakeLists.txt b/tests/CMakeLists.txt\n"
        "index 1..2 100644\n--- a/tests/CMakeLists.txt\n+++ b/tests/CMakeLists.txt\n"
        "@@ -1,1 +1,2 @@\n x\n+llama_build_and_test(test-foo.cpp)\n-- \n2.39.5\n\n"
    )
    patch = patchfile.parse(text)
    assert patch.subject == "tests : add a test with a folded subject"
    assert patch.body == "Why it exists."
    assert patch.trailer("Upstream-Status") == ["Submitted [https://example.invalid/pr/1]"]
    assert patch.files[0].added == ("llama_build_and_test(test-foo.cpp)",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not a patch\n", "first line"),
        ("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: a", "no blank line"),
        (
            FROM + "From: a\nSubject: [PATCH] x\n\nbody\n",
            "missing header",
        ),
        (
            FROM + "From: a\nDate: d\nSubject: x\n\nbody\n",
            "no [PATCH",
        ),
        (
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: a\nDate: d\n"
            "Subject: [PATCH] x\n\nbody only\n",
            "no `diff --git`",
        ),
    ],
)
def test_unparsable(text: str, message: str) -> None:
    with pytest.raises(patchfile.PatchParseError, match=message.replace("[", r"\[")):
        patchfile.parse(text)
