"""Every relative link in README.md and the guides under docs/ leads somewhere: to a file or folder of
the repository and, when it names an anchor (file.md#heading), to a heading of that file.

    python tests/docs/test_doc_links.py [-v]
"""
import glob
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import markdown_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def documents():
    """README.md, docs/*.md and the markdown one level below docs/ (bench/, spec/, design/)."""
    paths = [os.path.join(ROOT, "README.md")]
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "*", "*.md")))
    return paths


def broken_links(path):
    """'file:line: target (why)' for each relative link of the markdown file at path that leads nowhere."""
    text = read(path)
    here = os.path.dirname(path)
    broken = []
    for line, target in markdown_text.relative_links(text):
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
        where = "%s:%d: %s" % (os.path.relpath(path, ROOT), line, target)
        if not os.path.exists(dest):
            broken.append(where + " (no such file)")
        elif anchor and dest.endswith(".md"):
            anchors = markdown_text.heading_anchors(read(dest))
            if anchor not in anchors:
                broken.append(where + " (no heading with that anchor in %s)" % os.path.relpath(dest, ROOT))
    return broken


class DocLinks(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        docs = documents()
        self.assertIn(os.path.join(ROOT, "docs", "README.md"), docs, "docs/README.md, the index of the guides")
        broken, checked = [], 0
        for path in docs:
            checked += len(markdown_text.relative_links(read(path)))
            broken += broken_links(path)
        self.assertGreater(checked, 50, "the link finder found almost no links; is it broken?")
        self.assertEqual(broken, [], "links that lead nowhere:\n" + "\n".join(broken))

    def test_the_checker_catches_a_broken_link_and_anchor(self):
        """A control: a link to a missing file and one to a missing heading are both reported."""
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "a.md"), "w") as f:
                f.write("# Title `code`\n\n[ok](a.md#title-code) [gone](b.md) [no heading](a.md#other)\n"
                        "```\n[inside code](nowhere.md)\n```\n")
            broken = broken_links(os.path.join(d, "a.md"))
        self.assertEqual(len(broken), 2, broken)
        self.assertIn("b.md (no such file)", broken[0])
        self.assertIn("a.md#other (no heading", broken[1])


if __name__ == "__main__":
    unittest.main()
