"""Which hunks of `git clang-format --diff` count against a patch (dgr.maintain.style)."""

from __future__ import annotations

from dgr.maintain import style

DIFF = """\
diff --git a/src/a.cpp b/src/a.cpp
index 1111111..2222222 100644
--- a/src/a.cpp
+++ b/src/a.cpp
@@ -10,2 +10,3 @@ void f() {
-    throw std::runtime_error(format("a very long message %d", x));
+    throw std::runtime_error(
+        format("a very long message %d", x));
@@ -20,3 +21,3 @@ struct s {
-    int a;     // upstream's line
-    int bb; // added
-    int c;     // upstream's line
+    int a;   // upstream's line
+    int bb;  // added
+    int c;   // upstream's line
@@ -30,2 +31,2 @@ params p = {
-    /*.x =*/ 1,
-    /*.y =*/ 2,
+    /*.x =*/1,
+    /*.y =*/2,
"""


def test_only_hunks_of_added_lines_count() -> None:
    added = {"src/a.cpp": {10, 11, 21, 30, 31}}
    problems = style.clang_format_findings(DIFF, added)
    # line 10-11: added by the patch -> a finding; 20-22: upstream's aligned block -> follows its style;
    # 30-31: only the space after /*.field =*/ -> upstream's idiom
    assert len(problems) == 1
    assert problems[0].startswith("src/a.cpp:10:")
    assert "a very long message" in problems[0]


def test_a_hunk_of_another_file_does_not_count() -> None:
    assert style.clang_format_findings(DIFF, {"src/b.cpp": {10, 11}}) == []


def test_no_diff_no_finding() -> None:
    assert style.clang_format_findings("", {"src/a.cpp": {1}}) == []
