"""mtcore.data.placeholders: canonical multisets of format specifiers and markup."""

import pytest

from mtcore.data.placeholders import extract, mismatch, strip


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Không thể mở tập tin %s: %s", ["%s", "%s"]),
        ("Lỗi %1$s ở dòng %2$d", ["%d", "%s"]),  # positions dropped: translators reorder
        ("%(name)s có %-10.3f MB", ["%(name)s", "%f"]),  # Python named; flags/width/precision dropped
        ("%.*s %*d %ld %lu %i", ["%*d", "%.*s", "%d", "%ld", "%lu"]),  # %i counts as %d
        ("Đã xong 100%%", ["%%"]),
        ("Sao chép %1 sang %2", ["%1", "%2"]),  # Qt/KDE
        ("{0} và {name} và {}", ["{0}", "{name}", "{}"]),
        ("Giá: {price:.2f}", ["{price:.2f}"]),
        ("<b>Đậm</b> &amp; <i>nghiêng</i><br/>", ["&amp;", "</b>", "</i>", "<b>", "<br/>", "<i>"]),
        ('<a href="%s">trang chủ</a>', ["%s", "</a>", "<a>"]),  # inside a tag counts too
        ("dòng một\\ndòng hai", ["\\n"]),
        ("50% số người", []),  # prose percent is not "% s"
        ("Cách dùng: cp <nguồn> <đích>", []),  # usage placeholders are prose, not markup
        ("Usage: cp <file> <dir>", []),
        ("", []),
    ],
)
def test_extract(text, expected):
    assert extract(text) == expected


@pytest.mark.parametrize(
    "src, tgt, missing, extra",
    [
        ("%s of %d", "%d của %s", [], []),
        ("%1$s copied to %2$s", "%2$s được chép từ %1$s", [], []),
        ("Cannot open %s", "Không thể mở", ["%s"], []),
        ("Cannot open %s", "Không thể mở %d", ["%s"], ["%d"]),
        ("<b>Warning</b>", "<b>Cảnh báo", ["</b>"], []),
        ("Hello {name}", "Xin chào {tên}", ["{name}"], []),
        ("Tom &amp; Jerry", "Tom &amp; Jerry", [], []),
    ],
)
def test_mismatch(src, tgt, missing, extra):
    assert mismatch(src, tgt) == (missing, extra)


def test_strip_removes_only_placeholders():
    assert strip("Tập tin %s có %d dòng").split() == ["Tập", "tin", "có", "dòng"]
