"""Reading markdown the way the docs tests need it: fenced code blocks (with the
`<!-- transcript: ... -->` marker written just above a block), shell commands in a block, relative
links, and the anchors GitHub gives headings."""
import re

FENCE = re.compile(r"^(```+)(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*transcript:\s*(\S+)\s*-->\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


class Block:
    """A fenced code block: its info string (`bash`, `yaml`, ...), the transcript marker above it
    (or None), its lines, and the 1-based line of its opening fence."""

    def __init__(self, info, marker, lines, line):
        self.info, self.marker, self.lines, self.line = info, marker, lines, line

    def text(self):
        return "".join(line + "\n" for line in self.lines)


def fenced_blocks(text):
    blocks, lines = [], text.split("\n")
    i, marker = 0, None
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            fence, start = m.group(1), i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith(fence):
                body.append(lines[i])
                i += 1
            blocks.append(Block(m.group(2), marker, body, start + 1))
            marker = None
        else:
            mm = MARKER.match(lines[i])
            if mm:
                marker = mm.group(1)
            elif lines[i].strip():
                marker = None  # a marker applies to the very next block only
        i += 1
    return blocks


def strip_comment(line):
    """The line without a shell comment: a '#' at the start or after whitespace, outside quotes."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_commands(block):
    """The commands of a shell block: comments dropped, '\\'-continued lines joined, blanks skipped."""
    commands, pending = [], ""
    for raw in block.lines:
        line = strip_comment(raw)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            commands.append(line)
    return commands


def outside_code(text, spans=True):
    """The text with fenced blocks (and inline code spans, unless spans=False) blanked, so that a
    link or a '#' line written as an example inside code is taken for neither."""
    out, in_block = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            in_block = not in_block
            out.append("")
            continue
        out.append("" if in_block else re.sub(r"`[^`]*`", "", line) if spans else line)
    return "\n".join(out)


def relative_links(text):
    """(line, target) of every link that is neither a URL nor mail."""
    found = []
    for n, line in enumerate(outside_code(text).split("\n"), start=1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # https:, mailto:, ...
            found.append((n, target))
    return found


def heading_anchors(text):
    """The anchors GitHub gives the headings of a markdown file: lowercased, punctuation other than
    '-' and '_' dropped, spaces to '-', a repeated anchor suffixed -1, -2, ..."""
    anchors, seen = set(), {}
    for line in outside_code(text, spans=False).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
    return anchors
